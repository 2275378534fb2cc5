"""The demo's report: per-window story, totals, the one-line summary, and where the files went."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from controller.adapters.notify.recording import RecordingNotifier
from controller.decide import ApiPrice, window_economics
from controller.demo.chart import write_chart, write_html
from controller.demo.model import DemoSettings, TimelinePoint
from controller.domain.status import TargetStatus
from controller.domain.traffic import TimeWindow
from controller.domain.trial import TrialResult
from controller.simulator.profiles import load_gpu
from controller.simulator.traffic.diurnal import DiurnalTraffic


@dataclass(frozen=True)
class ReportPaths:
    text: Path
    png: Path
    html: Path
    status: Path


@dataclass(frozen=True)
class Totals:
    peak_gain: float
    peak_hour: int
    day_gain: float
    slo_attainment: float
    requests: int
    trials: int
    rollouts: int
    rollbacks: int


@dataclass(frozen=True)
class DemoReport:
    text: str
    summary_line: str
    totals: Totals
    paths: ReportPaths
    status: TargetStatus


def totals(timeline: list[TimelinePoint], events: list[tuple[datetime, str, str]], trials: int) -> Totals:
    by_hour: dict[int, list[TimelinePoint]] = defaultdict(list)
    for p in timeline:
        by_hour[p.at.hour].append(p)
    busiest = max(by_hour, key=lambda h: sum(p.stock_tokens_per_s for p in by_hour[h]))
    peak = by_hour[busiest]
    peak_gain = _ratio(sum(p.tokens_per_s for p in peak), sum(p.stock_tokens_per_s for p in peak))
    day_gain = _ratio(sum(p.tokens_per_s for p in timeline), sum(p.stock_tokens_per_s for p in timeline))
    requests = sum(p.requests for p in timeline)
    good = sum(p.good_requests for p in timeline)
    return Totals(
        peak_gain=peak_gain,
        peak_hour=busiest,
        day_gain=day_gain,
        slo_attainment=good / requests if requests else 0.0,
        requests=requests,
        trials=trials,
        rollouts=sum(1 for _, kind, _ in events if kind == "Promote"),
        rollbacks=sum(1 for _, kind, _ in events if kind == "Rollback"),
    )


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def summary_line(t: Totals) -> str:
    return (
        f"summary: peak gain over stock {t.peak_gain:.2f}x, day gain over stock {t.day_gain:.2f}x, "
        f"SLO attainment {t.slo_attainment:.1%}"
    )


def _window_of(p: TimelinePoint, windows: tuple[TimeWindow, ...]) -> str:
    hour = p.at.hour + p.at.minute / 60
    return next((w.name for w in windows if w.contains(hour)), "?")


def _tick_seconds(timeline: list[TimelinePoint]) -> float:
    return (timeline[1].at - timeline[0].at).total_seconds() if len(timeline) > 1 else 60.0


def render_text(
    settings: DemoSettings,
    status: TargetStatus,
    timeline: list[TimelinePoint],
    trials: list[tuple[datetime, TrialResult]],
    events: list[tuple[datetime, str, str]],
    windows: tuple[TimeWindow, ...],
    t: Totals,
) -> str:
    gpu_usd_per_hour = load_gpu(settings.gpu).cost_per_hour_usd
    api = ApiPrice(
        input_per_million=settings.api_input_usd_per_million, output_per_million=settings.api_output_usd_per_million
    )
    lines = [
        f"Shiftlight demo: {settings.model} on {settings.gpu}, traffic '{settings.traffic_profile}', "
        f"seed {settings.seed}, {settings.hours:g} simulated hours, a control cycle every {settings.cycle_s:g} s",
        f"GPU at ${gpu_usd_per_hour:.2f}/h; API price compared: ${api.input_per_million:.2f} in / "
        f"${api.output_per_million:.2f} out per million tokens",
        "",
    ]
    for w in windows:
        points = [p for p in timeline if _window_of(p, windows) == w.name]
        if not points:
            continue
        lines.append(f"== window '{w.name}' ({w.start_hour:g}:00-{w.end_hour:g}:00)")
        conc = sum(p.concurrency for p in points) / len(points)
        prompt = sum(p.prompt_mean for p in points) / len(points)
        out = sum(p.output_mean for p in points) / len(points)
        rate = sum(p.arrival_rate for p in points) / len(points)
        lines.append(
            f"   shape: {rate:.2f} req/s, {conc:.0f} concurrent, {prompt:.0f} in / {out:.0f} out tokens (mean)"
        )
        window_trials = [(at, r) for at, r in trials if r.shape.window is not None and r.shape.window.name == w.name]
        if window_trials:
            lines.append(f"   trials on the canary ({len(window_trials)}):")
            for at, r in window_trials:
                lines.append(f"     {at:%H:%M}  {r.summary()}")
        entry = status.schedule_for(w.name)
        if entry is not None:
            lines.append(f"   chosen: {entry.config.label()} ({entry.gain:.2f}x stock goodput in trials)")
            lines.append(f"   why: {entry.reason}")
        for at, kind, message in events:
            if kind in {"SetWeights", "Promote", "Rollback", "RequestApproval"} and w.contains(
                at.hour + at.minute / 60
            ):
                lines.append(f"   {at:%H:%M} {kind}: {message}")
        requests = sum(p.requests for p in points)
        good = sum(p.good_requests for p in points)
        gain = _ratio(sum(p.tokens_per_s for p in points), sum(p.stock_tokens_per_s for p in points))
        attainment = good / requests if requests else 1.0
        lines.append(
            f"   result: {gain:.2f}x stock tokens/s at the observed concurrency, SLO attainment {attainment:.1%} "
            f"over {requests:,} requests"
        )
        replicas = sorted({p.replicas for p in points})
        econ = window_economics(
            window=w.name,
            gpu_hours=sum(p.gpu_seconds for p in points) / 3600,
            gpu_usd_per_hour=gpu_usd_per_hour,
            input_tokens=sum(p.prompt_tokens for p in points),
            output_tokens=sum(p.output_tokens for p in points),
            capacity_output_tokens=sum(p.tokens_per_s * _tick_seconds(timeline) for p in points),
            api=api,
        )
        lines.append(f"   replicas: {', '.join(str(r) for r in replicas)} (GPUs held incl. candidates)")
        lines.append(f"   cost: {econ.describe()}")
        lines.append("")
    lines.append("== schedule")
    for entry in status.schedule:
        lines.append(f"   {entry.window:>14}: {entry.config.label()}  ({entry.gain:.2f}x stock)")
    lines.append(f"   active now: {status.active_config.label()}, phase {status.phase.value}")
    lines.append("")
    lines.append(
        f"totals: {t.requests:,} requests, {t.trials} canary trials, {t.rollouts} rollouts completed, "
        f"{t.rollbacks} rollbacks; busiest hour {t.peak_hour:02d}:00"
    )
    return "\n".join(lines)


def build_report(
    settings: DemoSettings,
    status: TargetStatus,
    timeline: list[TimelinePoint],
    trials: list[tuple[datetime, TrialResult]],
    notifier: RecordingNotifier,
    actions: list[tuple[datetime, str, str]],
) -> DemoReport:
    windows = DiurnalTraffic(settings.seed, settings.traffic_profile).windows
    events = actions
    t = totals(timeline, events, len(trials))
    text = render_text(settings, status, timeline, trials, events, windows, t)
    out = settings.out_dir
    out.mkdir(parents=True, exist_ok=True)
    paths = ReportPaths(text=out / "report.txt", png=out / "day.png", html=out / "day.html", status=out / "status.json")
    line = summary_line(t)
    paths.text.write_text(text + "\n" + line + "\n")
    paths.status.write_text(json.dumps(status.model_dump(mode="json"), indent=2))
    write_chart(paths.png, timeline, events)
    write_html(paths.html, paths.png, text, line)
    return DemoReport(text=text, summary_line=line, totals=t, paths=paths, status=status)
