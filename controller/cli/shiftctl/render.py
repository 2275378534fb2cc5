"""Pure renderers for shiftctl: TunedService bodies and their status in, rich tables / text / dicts out.

Everything shown passes through the one sanitiser (:mod:`controller.domain.text`): each field from a TunedService,
its status, a Trial or an Event is made :func:`~controller.domain.text.one_line` where it is interpolated (so none
can start a line of its own), every piece of a :class:`SafeText` is sanitised again as it is appended, and table
cells are :class:`~rich.text.Text` (rich markup in a field such as ``[green]`` is shown, not obeyed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.style import Style
from rich.text import Text

from controller.cli.shiftctl.table import Columns, columns
from controller.crd.models import TunedServiceSpec, parse_tuned_service, summarize
from controller.decide import ApiPrice, describe_account, schedule_economics
from controller.domain.config import STOCK, EngineConfig
from controller.domain.evidence import trial_name
from controller.domain.rollout import RolloutState
from controller.domain.status import Reason, TargetStatus, TuningRound
from controller.domain.text import block, one_line
from controller.domain.traffic import TimeWindow
from controller.domain.trial import TrialResult
from controller.errors import InvalidInput

JSON = dict[str, Any]
#: One field made safe for one line (the sanitiser's :func:`~controller.domain.text.one_line`).
safe = one_line


class SafeText(Text):
    """A rich Text whose appended strings are sanitised (:func:`~controller.domain.text.block`): whatever a
    renderer forgot to make one line, no control character, escape sequence or bidi control reaches the terminal."""

    def append(self, text: str | Text, style: str | Style | None = None) -> SafeText:
        super().append(block(text) if isinstance(text, str) else text, style)
        return self


def cell(value: object) -> Text:
    """A table cell: one safe line, shown literally (rich markup and emoji codes in it are not interpreted)."""
    return Text(one_line(value))


def age(created: str | None, now: datetime | None = None) -> str:
    """kubectl-style age (``45s``, ``12m``, ``3h``, ``2d``)."""
    if not created:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parsed(body: Mapping[str, Any]) -> tuple[TunedServiceSpec | None, TargetStatus | None, str]:
    """(spec, status, error) of a TunedService body; an invalid object is shown, not fatal."""
    try:
        spec, status = parse_tuned_service(body)
    except InvalidInput as exc:
        return None, None, str(exc)
    return spec, status, ""


def row(body: Mapping[str, Any], *, wide: bool, all_namespaces: bool, now: datetime | None = None) -> list[str]:
    meta = body.get("metadata", {})
    spec, status, error = parsed(body)
    cells = [str(meta.get("namespace", ""))] if all_namespaces else []
    cells.append(str(meta.get("name", "")))
    if status is None:
        cells += ["Invalid", "", "", "", "", age(meta.get("creationTimestamp"), now)]
        if wide:
            cells += ["", "", "", error.splitlines()[0] if error else ""]
        return cells
    summary = summarize(status)
    in_flight = status.rollout is not None and status.phase.value != "Observing"
    cells += [
        status.phase.value,
        summary.active_config,
        (summary.candidate_config or "") if in_flight else "",
        f"{summary.canary_weight}%" if in_flight else "",
        summary.gain,
        age(meta.get("creationTimestamp"), now),
    ]
    if wide:
        assert spec is not None
        cells += [
            spec.model.name,
            status.window or "",
            str(len(status.trials)),
            status.frozen_reason or (status.last_reasons[-1].message if status.last_reasons else ""),
        ]
    return cells


def list_table(bodies: Sequence[Mapping[str, Any]], *, wide: bool, all_namespaces: bool) -> Columns:
    headers = (["NAMESPACE"] if all_namespaces else []) + [
        "NAME",
        "PHASE",
        "ACTIVE",
        "CANDIDATE",
        "WEIGHT",
        "GAIN",
        "AGE",
    ]
    if wide:
        headers += ["MODEL", "WINDOW", "TRIALS", "REASON"]
    return columns(headers, (row(body, wide=wide, all_namespaces=all_namespaces) for body in bodies))


def _ms(value: float | None) -> str:
    return f"{value * 1000:.0f} ms" if value is not None else "-"


def trials_table(trials: Sequence[TrialResult], *, service: str, wide: bool = False) -> Columns:
    """The status's trials, best goodput first, each under its Trial CR's name (the trial's one identifier)."""
    cols = ["NAME", "CONFIG", "STATUS", "GOODPUT TOK/S", "OUTPUT TOK/S", "TTFT P95", "TPOT P95", "SLO"]
    if wide:
        cols += ["SOURCE", "SHAPE", "REASON"]
    rows = []
    for t in sorted(trials, key=lambda t: -t.objective()):
        cells = [
            trial_name(service, t.config, t.shape),
            t.config.label(),
            t.status.value,
            f"{t.goodput_tokens_per_s:,.0f}",
            f"{t.output_tokens_per_s:,.0f}",
            _ms(t.ttft_s.p95 if t.ttft_s else None),
            _ms(t.tpot_s.p95 if t.tpot_s else None),
            "met" if t.meets_slo() else "missed",
        ]
        if wide:
            cells += [t.source, t.shape.describe(), t.reason]
        rows.append(cells)
    return columns(cols, rows, numeric=(3, 4, 5, 6))


def knobs(config: EngineConfig, base: EngineConfig = STOCK) -> list[str]:
    return [f"{k}: {b!r} -> {a!r}" for k, (a, b) in config.changed_knobs(base).items()]


def describe_text(body: Mapping[str, Any], events: Sequence[Mapping[str, Any]] = ()) -> Text:
    meta = body.get("metadata", {})
    spec, status, error = parsed(body)
    out = SafeText()
    out.append(f"Name:          {safe(meta.get('name'))}\n")
    out.append(f"Namespace:     {safe(meta.get('namespace'))}\n")
    out.append(f"Created:       {safe(meta.get('creationTimestamp'))}\n")
    if spec is None or status is None:
        out.append(f"Invalid:       {safe(error)}\n", style="red")
        return out
    out.append(f"Model:         {safe(spec.model.name)} on {safe(spec.gpu_type)}\n")
    deployments = ", ".join(safe(d) for d in spec.workload.deployments)
    out.append(f"Workload:      deployments {deployments}; service {safe(spec.workload.service)}")
    out.append(
        f"; route {safe(spec.workload.http_route)}\n"
        if spec.workload.http_route
        else "; no HTTPRoute (replica ratio)\n"
    )
    out.append(f"Policy:        {safe(spec.policy.preset or 'default')}; approval {safe(spec.approval_mode)}")
    out.append("; DRY RUN\n" if spec.dry_run else "\n")
    out.append(f"Phase:         {status.phase.value}\n", style="bold")
    if status.frozen_reason:
        out.append(f"Frozen:        {safe(status.frozen_reason)}\n", style="yellow")
    out.append(f"Active config: {safe(status.active_config.label())} ({status.active_config.key()})\n")
    args = " ".join(safe(a) for a in status.active_config.vllm_args()) or "(vLLM defaults)"
    out.append(f"  vllm args:   {args}\n")
    out.append(f"Replicas:      {status.replicas}    Window: {safe(status.window or '-')}\n")
    r = status.rollout
    if r is not None:
        out.append(
            f"Rollout:       {safe(r.id)}: {safe(r.from_config.label())} -> {safe(r.to_config.label())}\n", style="bold"
        )
        out.append(
            f"  steps:       {', '.join(f'{w}%' for w in r.steps)}; at step {r.step_index + 1}, weight {r.weight}%"
        )
        out.append("; PAUSED" if r.paused else "")
        out.append(f"; ABORT requested ({safe(r.abort_reason)})" if r.abort_requested else "")
        out.append(f"\n  proposed by: {safe(r.proposed_by)}; reason: {safe(r.reason)}\n")
        for a in r.approvals:
            out.append(
                f"  {safe(a.decision):<9}  step {a.step + 1} by {safe(a.by)} at {a.at.isoformat()} {safe(a.comment)}\n"
            )
        for an in r.analyses:
            out.append(f"  analysis    step {an.step + 1} ({an.weight}%): {safe(an.outcome)}: {safe(an.reason)}\n")
    if status.last_reasons:
        out.append("Last reasons:\n", style="bold")
        for reason in status.last_reasons[-8:]:
            out.append(f"  - {reason_line(reason)}\n")
    if events:
        out.append("Events:\n", style="bold")
        for e in events[-10:]:
            out.append(f"  {safe(e.get('type', '')):<8} {safe(e.get('reason', '')):<16} {safe(e.get('message', ''))}\n")
    return out


def explain_text(body: Mapping[str, Any]) -> Text:
    """Why this config: the traffic shape it was tuned for, the trials behind it, who proposed it."""
    _spec, status, error = parsed(body)
    out = SafeText()
    if status is None:
        out.append(f"cannot explain an invalid object: {safe(error)}\n", style="red")
        return out
    name = body.get("metadata", {}).get("name")
    name_ = str(name or "")
    active = status.active_config
    out.append(f"{safe(name)} runs {safe(active.label())}", style="bold")
    out.append(f" (phase {status.phase.value})\n")
    changed = knobs(active)
    out.append("Changed from stock vLLM:\n" if changed else "This is stock vLLM (no tuned knobs).\n")
    for line in changed:
        out.append(f"  {safe(line)}\n")
    shape = status.tuned_shape
    entry = next((s for s in status.schedule if s.config == active), None)
    if entry is not None:
        shape = entry.shape
        out.append(
            f"Window {safe(entry.window)}: {entry.goodput_tokens_per_s:,.0f} goodput tok/s vs "
            f"{entry.stock_goodput_tokens_per_s:,.0f} for stock ({entry.gain:.2f}x). {safe(entry.reason)}\n"
        )
    if shape is not None:
        out.append(f"Traffic shape it was tuned for: {safe(shape.describe())}\n")
    if status.rollout is not None:
        _explain_rollout(out, status.rollout)
    if status.tuning is not None:
        _explain_tuning(out, status, status.tuning, name_)
    if status.trials:
        best = max(status.trials, key=lambda t: t.objective())
        out.append(f"Evidence ({len(status.trials)} trials; best first):\n", style="bold")
        for trial in sorted(status.trials, key=lambda t: -t.objective())[:5]:
            mark = "*" if trial is best else " "
            out.append(f" {mark} {safe(trial_name(name_, trial.config, trial.shape))} {safe(trial.summary())}\n")
    if status.schedule_account is not None:
        out.append(f"Schedule account: {safe(describe_account(status.schedule_account))}\n")
    for no in status.rejections[-5:]:  # not proposed again for the window until its traffic drifts or time passes
        out.append(
            f"Rejected {safe(no.config_label or no.config_key)} for window {safe(no.window)} by {safe(no.by)} at "
            f"{no.at.isoformat()}" + (f": {safe(no.comment)}" if no.comment else "") + "\n"
        )
    if status.last_reasons:
        out.append("Latest decisions:\n", style="bold")
        for reason in status.last_reasons[-5:]:
            out.append(f"  - {reason_line(reason)}\n")
    return out


def _explain_rollout(out: SafeText, r: RolloutState) -> None:
    out.append(f"Proposed by {safe(r.proposed_by)}: {safe(r.reason)}\n")
    if r.expected_gain:
        out.append(f"Expected gain: {r.expected_gain:.2f}x\n")
    for a in r.approvals:
        out.append(f"{safe(a.decision.capitalize())} by {safe(a.by)} at {a.at.isoformat()} (step {a.step + 1})\n")


def _explain_tuning(out: SafeText, status: TargetStatus, t: TuningRound, name: str) -> None:
    out.append(f"Tuning round {safe(t.id)} ({safe(t.window)}): {safe(t.reason)}\n")
    for key, who, why in zip(t.trial_keys, t.trial_proposers, t.trial_reasons, strict=False):
        run = next((r for r in status.trials if r.config.key() == key), None)  # each trial by its Trial's name
        which = trial_name(name, run.config, run.shape) if run else f"of config {key} (no result yet)"
        out.append(f"  trial {safe(which)} proposed by {safe(who)}: {safe(why)}\n")


def reason_line(reason: Reason) -> str:
    """One reason as ``[code] message`` (the code first, as the Event's reason and Slack show it), made safe."""
    return f"[{safe(reason.code)}] {safe(reason.message)}" if reason.code else safe(reason.message)


def history_lines(status: TargetStatus) -> list[str]:
    """One safe line per entry: the finished rollouts, then the current rollout's approvals and analyses."""
    lines = [safe(h) for h in status.history]
    r = status.rollout
    if r is not None:
        lines.append(
            f"rollout {safe(r.id)}: {safe(r.from_config.label())} -> {safe(r.to_config.label())} "
            f"started {r.started_at.isoformat()}"
        )
        events: list[tuple[datetime, str]] = [
            (
                a.at,
                f"  {safe(a.decision)} step {a.step + 1} by {safe(a.by)}"
                + (f": {safe(a.comment)}" if a.comment else ""),
            )
            for a in r.approvals
        ]
        events += [
            (an.at, f"  analysis step {an.step + 1} at {an.weight}%: {safe(an.outcome)}: {safe(an.reason)}")
            for an in r.analyses
        ]
        lines += [text for _, text in sorted(events, key=lambda e: e[0])]
        lines.append(f"  now at step {r.step_index + 1}/{len(r.steps)}, weight {r.weight}%")
    return lines


def cost_table(status: TargetStatus, *, gpu_hour_price: float | None = None) -> Columns:
    """Per window: goodput vs stock and what a million output tokens costs in GPU-hours (and money, if priced)."""
    cols = ["WINDOW", "CONFIG", "REPLICAS", "GOODPUT TOK/S", "STOCK TOK/S", "GAIN", "GPU-H/1M TOK", "STOCK GPU-H/1M"]
    if gpu_hour_price is not None:
        cols += ["COST/1M TOK", "STOCK COST/1M"]
    rows = []

    def gpu_hours_per_million(tok_s: float, gpus: int) -> float | None:
        return gpus * 1e6 / (tok_s * 3600) if tok_s > 0 else None

    def fmt(v: float | None, money: bool = False) -> str:
        if v is None:
            return "-"
        return f"{v:,.2f}" if money else f"{v:,.3f}"

    for s in status.schedule:
        gpus = max(s.replicas, 1) * s.config.tensor_parallel_size  # stock is compared on the same GPUs
        ours = gpu_hours_per_million(s.goodput_tokens_per_s, gpus)
        stock = gpu_hours_per_million(s.stock_goodput_tokens_per_s, gpus)
        cells = [
            s.window,
            s.config.label(),
            str(s.replicas),
            f"{s.goodput_tokens_per_s:,.0f}",
            f"{s.stock_goodput_tokens_per_s:,.0f}",
            f"{s.gain:.2f}x",
            fmt(ours),
            fmt(stock),
        ]
        if gpu_hour_price is not None:
            cells += [
                fmt(ours * gpu_hour_price if ours is not None else None, money=True),
                fmt(stock * gpu_hour_price if stock is not None else None, money=True),
            ]
        rows.append(cells)
    return columns(cols, rows)


def economics_table(
    status: TargetStatus, windows: Sequence[TimeWindow], *, gpu_hour_price: float, api: ApiPrice
) -> Columns:
    """Per window at the load measured when it was tuned: cost per million output tokens against the API price,
    with the windows where the API would be cheaper (idle GPUs) flagged."""
    rows = []
    for e in schedule_economics(status.schedule, windows=windows, gpu_usd_per_hour=gpu_hour_price, api=api):
        rows.append(
            (
                e.window,
                f"{e.gpu_hours:,.1f}",
                f"{e.utilisation:.0%}",
                f"${e.self_hosted_usd:,.2f}",
                f"${e.usd_per_million_output:,.2f}",
                f"${e.api_usd:,.2f}",
                "-"
                if not e.api_usd
                else "API (idle GPUs)"
                if e.api_is_cheaper
                else f"self-hosted ({e.saving:.0%} less)",
            )
        )
    return columns(("WINDOW", "GPU-H", "UTILISATION", "SELF-HOSTED", "$/1M OUT", "API", "CHEAPER"), rows)


__all__ = [
    "SafeText",
    "age",
    "cell",
    "cost_table",
    "describe_text",
    "economics_table",
    "explain_text",
    "history_lines",
    "knobs",
    "list_table",
    "parsed",
    "row",
    "trials_table",
]
