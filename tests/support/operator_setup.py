"""How the reactor's tests set the operator up: in-process settings for a control loop on the ``simulator`` backend,
and the environment of an operator process (``python -m controller.reactor.run``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from controller.reactor.settings import ConnectionSettings, LoopSettings, OperatorSettings


def simulator_settings(kubeconfig: Path, policy_dir: Path) -> OperatorSettings:
    """Settings for a loop the test cycles itself: no health or metrics endpoint, five minutes of simulated time
    a second, short idle and requeue sleeps."""
    return OperatorSettings(
        connection=ConnectionSettings(kubeconfig=str(kubeconfig)),
        policy_dir=policy_dir,
        health_port=None,
        metrics_port=None,
        loop=LoopSettings(time_scale=300.0, idle_s=0.1, min_sleep_s=0.02),
    )


def kubernetes_settings(kubeconfig: Path, policy_dir: Path, **fields: Any) -> OperatorSettings:
    """The ``kubernetes`` backend's settings for an operator a test drives: no health or metrics endpoint."""
    return OperatorSettings(
        backend="kubernetes",
        connection=ConnectionSettings(kubeconfig=str(kubeconfig)),
        policy_dir=policy_dir,
        health_port=None,
        metrics_port=None,
        **fields,
    )


def operator_env(kubeconfig: Path, policy_dir: Path, port: int) -> dict[str, str]:
    """The environment of an operator process as the chart starts it (pod ``shiftlight/shiftlight-0``): health and
    metrics on ``port``, policies from ``policy_dir``, five minutes of simulated time a second, warnings only."""
    return {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "POD_NAME": "shiftlight-0",
        "POD_NAMESPACE": "shiftlight",
        "SHIFTLIGHT_HEALTH_PORT": str(port),
        "SHIFTLIGHT_METRICS_PORT": str(port),
        "SHIFTLIGHT_POLICY_DIR": str(policy_dir),
        "SHIFTLIGHT_TIME_SCALE": "300",
        "SHIFTLIGHT_LOG_LEVEL": "warning",
    }
