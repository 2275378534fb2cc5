"""``shiftlight calibrate``: measure the GPU the canary pool has and fit the performance model's efficiencies to it.

* :mod:`controller.calibrate.shapes` derives the layer shapes to time from a model profile (CPU side).
* :mod:`controller.calibrate.gpu_probe` times the primitives on the GPU (PyTorch and the standard library only), with
  the sweeps of :mod:`~controller.calibrate.gpu_probe_sweeps`, :mod:`~controller.calibrate.gpu_probe_layer` and
  :mod:`~controller.calibrate.gpu_probe_e2e`.
* :mod:`controller.calibrate.fit` turns the raw timings into a calibration profile, with the efficiency curves
  per kernel family of :mod:`controller.calibrate.family_fits`.
* :mod:`controller.simulator.calibration_profile` is the calibration profile (YAML next to the GPU profile) and its
  loader, which the performance model reads; :mod:`controller.calibrate.profile` names them for the commands.
"""
