"""The parts of the ``simulator`` backend's runtime that are about the simulated fleet itself.

* :func:`load_calibration_setting`: the calibration profile the admin mounted, checked at start;
* :class:`Hardware`: the model and GPU profiles that play a TunedService with the calibration of that GPU (None: the
  profiles' constants), which builds their performance model;
* :func:`kept_fleet`: the fleet a spec change keeps; :func:`eventing_cluster`: the fleet as the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from controller.adapters.kube.events import KubeEvents
from controller.errors import InvalidInput
from controller.ports import TrafficRouter
from controller.reactor.runtime import EventingCluster, MirroredRouter, TargetRuntime

if TYPE_CHECKING:
    from controller.calibrate.profile import Calibration
    from controller.simulator.fleet.service import SimulatedFleet
    from controller.simulator.perf import PerformanceModel


def load_calibration_setting(path: Path | None) -> Calibration | None:
    """The calibration profile the admin mounted (``SHIFTLIGHT_SIMULATOR_CALIBRATION_FILE``), checked at start: a
    file that cannot be read, is not a calibration profile, or is for a GPU the simulator has no profile for is
    refused, naming the variable."""
    if path is None:
        return None
    from controller.calibrate.profile import read_calibration
    from controller.simulator.profiles import gpu_names

    name = "SHIFTLIGHT_SIMULATOR_CALIBRATION_FILE"
    try:
        calibration = read_calibration(path)
    except InvalidInput as exc:
        raise InvalidInput(str(exc), source="environment", field=name) from None
    if calibration.gpu not in gpu_names():
        raise InvalidInput(
            f"{path} is a calibration of GPU {calibration.gpu!r}, which has no GPU profile ({', '.join(gpu_names())})",
            source="environment",
            field=name,
        )
    return calibration


@dataclass(frozen=True)
class Hardware:
    """The model and GPU profiles that play a TunedService, and the calibration they run on."""

    model: str
    gpu: str
    calibration: Calibration | None
    """The admin's calibration when it is of this GPU, else None (the profiles' constants)."""

    @classmethod
    def of(cls, model: str, gpu: str, calibration: Calibration | None) -> Hardware:
        """The profiles ``model`` and ``gpu``, on ``calibration`` when it is a calibration of ``gpu``."""
        return cls(model, gpu, calibration if calibration is not None and calibration.gpu == gpu else None)

    @property
    def curves(self) -> str:
        """``calibrated`` or ``constants``: which curves the performance model follows."""
        return "calibrated" if self.calibration is not None else "constants"

    def performance(self) -> PerformanceModel:
        """A new performance model of these profiles, on the calibration's curves when there is one."""
        from controller.simulator.perf import PerformanceModel
        from controller.simulator.profiles import load_gpu, load_model

        if self.calibration is None:
            return PerformanceModel(load_model(self.model), load_gpu(self.gpu))
        return PerformanceModel(load_model(self.model), load_gpu(self.gpu), self.calibration, prefill_fixes=True)


def kept_fleet(previous: TargetRuntime | None) -> SimulatedFleet | None:
    """The fleet of a TunedService's previous runtime: a spec change keeps the simulated production fleet (it is the
    "cluster", not the operator's)."""
    from controller.adapters.simulated.fleet import SimulatedCluster

    if previous is None or not isinstance(previous.ports.cluster, EventingCluster):
        return None
    inner = previous.ports.cluster.inner
    return inner.fleet if isinstance(inner, SimulatedCluster) else None


def eventing_cluster(fleet: SimulatedFleet, router: TrafficRouter, events: KubeEvents) -> EventingCluster:
    """The fleet as the cluster, each action's Event in Kubernetes; a mirrored route follows each promotion."""
    from controller.adapters.simulated.fleet import SimulatedCluster

    cluster = EventingCluster(SimulatedCluster(fleet), events)
    if isinstance(router, MirroredRouter):
        mirrored = router.mirror
        cluster.on_promote.append(lambda t: mirrored.set_weight(t, 0))  # the route follows the promotion
    return cluster


__all__ = ["Hardware", "eventing_cluster", "kept_fleet", "load_calibration_setting"]
