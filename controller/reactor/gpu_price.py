"""What a GPU-hour of a TunedService's fleet costs, for the decisions' cost in Slack and the daily digest: the
admin's price (``SHIFTLIGHT_GPU_HOUR_USD``, chart ``cost.gpuHourUsd``), else the list price of the GPU profile its
``spec.gpuType`` maps to, else none (GPU-hours only). Costs are reckoned by the tuning economics."""

from __future__ import annotations

from dataclasses import dataclass

from controller.crd.models import TunedServiceSpec
from controller.decide import ApiPrice, window_economics
from controller.reactor.settings import OperatorSettings
from controller.reactor.simulator_backend import gpu_profile

#: The setting's source, as a decision message names it.
SETTING_SOURCE = "chart cost.gpuHourUsd"
_NO_API = ApiPrice(input_per_million=0.0, output_per_million=0.0)


@dataclass(frozen=True)
class GpuHourPrice:
    """A GPU-hour's price in USD and where it comes from (:class:`controller.domain.evidence.GpuPrice`)."""

    usd_per_hour: float
    source: str

    def usd(self, gpu_hours: float, *, window: str) -> float:
        return window_economics(
            window=window,
            gpu_hours=gpu_hours,
            gpu_usd_per_hour=self.usd_per_hour,
            input_tokens=0.0,
            output_tokens=0.0,
            capacity_output_tokens=0.0,
            api=_NO_API,
        ).self_hosted_usd


def gpu_price(spec: TunedServiceSpec, settings: OperatorSettings) -> GpuHourPrice | None:
    """The admin's price when set; else the list price of the GPU profile ``spec.gpuType`` maps to (``H200-141GB``
    is the ``h200`` profile); None when neither is known."""
    if settings.gpu_hour_usd is not None:
        return GpuHourPrice(settings.gpu_hour_usd, SETTING_SOURCE)
    from controller.simulator.profiles import gpu_names, load_gpu

    name = gpu_profile(spec.gpu_type, gpu_names())
    if name is None:
        return None
    return GpuHourPrice(load_gpu(name).cost_per_hour_usd, f"list price of the {name} profile")


def api_price(settings: OperatorSettings) -> ApiPrice:
    """The API price the daily digest compares self-hosting against."""
    return ApiPrice(
        input_per_million=settings.api_input_usd_per_million, output_per_million=settings.api_output_usd_per_million
    )


__all__ = ["SETTING_SOURCE", "GpuHourPrice", "api_price", "gpu_price"]
