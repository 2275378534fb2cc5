"""The calibration profile's model and loader, as :mod:`controller.calibrate` and its commands name them.

They live in :mod:`controller.simulator.calibration_profile`, below both the performance model that reads a profile
and the calibration that writes one.
"""

from __future__ import annotations

from controller.simulator.calibration_profile import (
    CALIBRATION_SCHEMA_VERSION,
    Calibration,
    Ceilings,
    Curve,
    DecodeAttention,
    EngineRuntime,
    GemmChain,
    KernelOverhead,
    LayerOps,
    MeasuredOn,
    MoeGemm,
    PrefillAttention,
    RawPoint,
    StateTraffic,
    WeightGemm,
    calibration_path,
    dump_calibration,
    load_calibration,
    parse_calibration,
    read_calibration,
)

__all__ = [
    "CALIBRATION_SCHEMA_VERSION",
    "Calibration",
    "Ceilings",
    "Curve",
    "DecodeAttention",
    "EngineRuntime",
    "GemmChain",
    "KernelOverhead",
    "LayerOps",
    "MeasuredOn",
    "MoeGemm",
    "PrefillAttention",
    "RawPoint",
    "StateTraffic",
    "WeightGemm",
    "calibration_path",
    "dump_calibration",
    "load_calibration",
    "parse_calibration",
    "read_calibration",
]
