"""Pure Block Kit builders for Shiftlight's Slack messages. No I/O; every function returns plain dicts.

Message kinds (:class:`Kind`), chosen from a :class:`~controller.domain.actions.Notify`'s code by :func:`classify`
(the layout in :data:`controller.domain.codes.INFO`; never from its title):

* ``decision``  a new config was chosen (or would be, in dry-run), with an evidence table stock vs chosen;
* ``step``      a rollout reached a weight step, started or completed;
* ``rollback``  traffic went back to stable, with its cause;
* ``approval``  a rollout waits for a human, with the exact ``shiftctl approve`` line;
* ``digest``    a target's daily summary (a ``Notify`` coded ``digest``), or the summary of all targets
                (built by :func:`digest_message`);
* ``generic``   anything else (frozen observation, no config meets the SLO, ..., and a notification without a code).

Every text field goes through the one sanitiser (:mod:`controller.domain.text`): each value from outside (a target's
name and model, a reason, a field, a digest note) is made one line where it is interpolated, so none can start a line
of its own; every mrkdwn text and the fallback ``text`` is then sanitised again (controls and bidi controls removed)
and escaped once as a whole (``&``, ``<``, ``>``), so ``<!channel>``, ``<!here>``, ``<@U…>`` and ``<url|label>``
show as typed and notify or link nobody. Headers are ``plain_text`` (never parsed for mentions), one line, escaped
the same way (Slack decodes the three entities in every text object).

``Notify.fields`` are ``(label, value)`` pairs. A value of the form ``"<stock> → <chosen>"`` is an evidence row
and goes into the evidence table (see :func:`evidence_fields`); other pairs are shown as labelled fields. A
``("kind", "<kind>")`` pair, if present, forces the kind and is not shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from controller.crd import models
from controller.domain import evidence
from controller.domain.actions import Notify, Severity
from controller.domain.codes import INFO, Layout, layout_of
from controller.domain.observation import TargetRef
from controller.domain.status import TargetStatus
from controller.domain.text import block, one_line, slack_escape
from controller.domain.trial import TrialResult

Block = dict[str, Any]
Message = dict[str, Any]

ARROW = " → "
#: Block Kit limits (https://api.slack.com/reference/block-kit/blocks).
MAX_HEADER = 150
MAX_TEXT = 3000
MAX_FIELDS = 10
MAX_FIELD = 2000
MAX_BLOCKS = 50

_EMOJI = {Severity.INFO: ":large_blue_circle:", Severity.WARNING: ":warning:", Severity.CRITICAL: ":rotating_light:"}


#: The layouts of a message (one per kind).
Kind = Layout


#: Escape the three characters Slack's mrkdwn treats as control characters (the sanitiser's).
escape = slack_escape
#: One field from outside, made one line (escaping is done once, on the whole text: see :func:`_mrkdwn`).
f = one_line


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _mrkdwn(text: str, limit: int = MAX_TEXT) -> Block:
    """A mrkdwn text object: the whole text sanitised (line breaks kept) and escaped once, then cut to ``limit``.
    Shiftlight's own markup in it is ``*bold*``, backticks, fences and emoji codes, never ``<…>``."""
    return {"type": "mrkdwn", "text": _cut(slack_escape(block(text)), limit)}


def _section(text: str) -> Block:
    return {"type": "section", "text": _mrkdwn(text)}


def _header(text: str) -> Block:
    # plain_text is not parsed for mentions, but Slack decodes the three entities in every text object all the same
    plain = _cut(slack_escape(one_line(text)), MAX_HEADER)
    return {"type": "header", "text": {"type": "plain_text", "text": plain, "emoji": True}}


def _context(*parts: str) -> Block:
    return {"type": "context", "elements": [_mrkdwn(p) for p in parts if p]}


def _divider() -> Block:
    return {"type": "divider"}


def approve_command(target: TargetRef) -> str:
    return f"shiftctl approve {target.name} -n {target.namespace}"


def reject_command(target: TargetRef) -> str:
    return f"shiftctl reject {target.name} -n {target.namespace}"


def explain_command(target: TargetRef) -> str:
    return f"shiftctl explain {target.name} -n {target.namespace}"


# ----- fields and evidence --------------------------------------------------------------------------


@dataclass(frozen=True)
class EvidenceRow:
    metric: str
    stock: str
    chosen: str


def split_fields(fields: Sequence[tuple[str, str]]) -> tuple[str | None, list[EvidenceRow], list[tuple[str, str]]]:
    """``(forced kind, evidence rows, other fields)`` of a notification's fields."""
    kind: str | None = None
    rows: list[EvidenceRow] = []
    other: list[tuple[str, str]] = []
    for label, value in fields:
        if label == "kind":
            kind = value
        elif ARROW in value:
            stock, chosen = value.split(ARROW, 1)
            rows.append(EvidenceRow(label, stock.strip(), chosen.strip()))
        else:
            other.append((label, value))
    return kind, rows, other


def evidence_fields(
    stock: TrialResult,
    chosen: TrialResult,
    *,
    gpu_hours_per_day: tuple[float, float] | None = None,
    cost_per_day: tuple[float, float] | None = None,
    currency: str = "$",
) -> tuple[tuple[str, str], ...]:
    """``Notify.fields`` rows comparing the stock and chosen trials (``"metric", "stock → chosen"``).

    ``gpu_hours_per_day`` and ``cost_per_day`` are the projected (stock, chosen) values for serving the same
    traffic, when the caller knows them.
    """

    def ms(t: TrialResult, which: str) -> str:
        pct = t.ttft_s if which == "ttft" else t.tpot_s
        if pct is None:
            return "n/a"
        return f"{pct.p95 * 1000:,.0f} ms" if which == "ttft" else f"{pct.p95 * 1000:,.1f} ms"

    rows = [
        ("Output tokens/s", f"{stock.output_tokens_per_s:,.0f}{ARROW}{chosen.output_tokens_per_s:,.0f}"),
        ("TTFT p95", f"{ms(stock, 'ttft')}{ARROW}{ms(chosen, 'ttft')}"),
        ("TPOT p95", f"{ms(stock, 'tpot')}{ARROW}{ms(chosen, 'tpot')}"),
        ("Goodput tokens/s", f"{stock.goodput_tokens_per_s:,.0f}{ARROW}{chosen.goodput_tokens_per_s:,.0f}"),
    ]
    if gpu_hours_per_day is not None:
        rows.append(("GPU-hours/day", f"{gpu_hours_per_day[0]:,.1f}{ARROW}{gpu_hours_per_day[1]:,.1f}"))
    if cost_per_day is not None:
        rows.append(("Cost/day", f"{currency}{cost_per_day[0]:,.2f}{ARROW}{currency}{cost_per_day[1]:,.2f}"))
    rows.append(("Config", f"{stock.config.label()}{ARROW}{chosen.config.label()}"))
    return tuple(rows)


def evidence_table(rows: Sequence[EvidenceRow]) -> str:
    """A monospace table (Slack has no table block in incoming webhooks' mrkdwn): metric | stock | chosen."""
    header = EvidenceRow("", "stock", "chosen")
    all_rows = [header, *(EvidenceRow(f(r.metric), f(r.stock), f(r.chosen)) for r in rows)]
    w0 = max(len(r.metric) for r in all_rows)
    w1 = max(len(r.stock) for r in all_rows)
    lines = [f"{r.metric:<{w0}}  {r.stock:>{w1}}  {r.chosen}" for r in all_rows]
    return "```\n" + "\n".join(lines) + "\n```"


_CODE_BLOCKS = {evidence.SERVE: "Candidate's `vllm serve` flags", evidence.DIFF: "Diff against the active config",
                evidence.TRIALS: "Trials (by Trial name)"}  # fmt: skip
_LINES = {evidence.LOSSY: "Lossy knobs", evidence.QUALITY: "Quality gate"}


def approval_evidence_text(pairs: Sequence[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """The approver's evidence among a notification's fields (:mod:`controller.domain.evidence`), as one mrkdwn
    text (flags, diff and trials in code blocks, a line each), and the other fields."""
    found = {label: value for label, value in pairs if label in evidence.EVIDENCE_LABELS}
    parts: list[str] = []
    for label in evidence.EVIDENCE_LABELS:
        if label not in found:
            continue
        lines = [f(line) for line in found[label].splitlines()] or [""]
        if label in _CODE_BLOCKS:
            parts.append(f"*{_CODE_BLOCKS[label]}*\n```\n" + "\n".join(lines) + "\n```")
        else:
            parts.append(f"*{_LINES[label]}:* " + "; ".join(lines))
    return "\n".join(parts), [(k, v) for k, v in pairs if k not in evidence.EVIDENCE_LABELS]


def _fields_block(pairs: Sequence[tuple[str, str]]) -> list[Block]:
    blocks = []
    for start in range(0, len(pairs), MAX_FIELDS):
        chunk = pairs[start : start + MAX_FIELDS]
        blocks.append(
            {
                "type": "section",
                "fields": [_mrkdwn(f"*{f(k)}*\n{f(v)}", MAX_FIELD) for k, v in chunk],
            }
        )
    return blocks


# ----- one notification -----------------------------------------------------------------------------


def classify(notification: Notify) -> Kind:
    """Which kind of message a notification is: a ``("kind", ...)`` field, else its code's layout
    (:func:`controller.domain.codes.layout_of`: where several notifications carry the code, its severity and evidence
    choose); a notification without a code is a decision if it carries evidence, else generic. The title is never
    read."""
    forced, rows, _ = split_fields(notification.fields)
    if forced is not None:
        try:
            return Kind(forced)
        except ValueError:
            pass
    if notification.code is None:
        return Kind.DECISION if rows else Kind.GENERIC
    return layout_of(INFO[notification.code], notification.severity, bool(rows))


def build_message(target: TargetRef, notification: Notify, *, channel: str = "") -> Message:
    """The webhook payload (``text`` fallback + ``blocks``) for one notification about ``target``."""
    kind = classify(notification)
    _, rows, other = split_fields(notification.fields)
    emoji = _EMOJI[notification.severity]
    where = f"`{f(target)}` · model `{f(target.model)}`"
    reason = f(notification.reason)
    blocks: list[Block] = [_header(f"{notification.title} · {target.name}")]

    if kind is Kind.ROLLBACK:
        blocks.append(_section(f"{emoji} *Rolled back* {where}\n*Cause:* {reason}"))
    elif kind is Kind.APPROVAL:
        blocks.append(_section(f"{emoji} *Approval needed* for {where}\n{reason}"))
        blocks.append(
            _section(
                "Approve with:\n```\n"
                + f(approve_command(target))
                + "\n```\nor reject with `"
                + f(reject_command(target))
                + "`"
            )
        )
    elif kind is Kind.STEP:
        blocks.append(_section(f"{emoji} {where}\n{reason}"))
    elif kind is Kind.DIGEST:
        blocks.append(_section(f":calendar: *Daily digest* for {where}\n{reason}"))
    elif kind is Kind.DECISION:
        blocks.append(_section(f"{emoji} *Decision* for {where}\n{reason}"))
    else:
        blocks.append(_section(f"{emoji} {where}\n{reason}"))

    if rows:
        blocks.append(_section("*Evidence*\n" + evidence_table(rows)))
    shown, other = approval_evidence_text(other)
    if shown:
        blocks.append(_section(shown))
    if other:
        blocks.extend(_fields_block(other))
    blocks.append(
        _context(
            f"severity *{notification.severity.value}*",
            f"code `{f(notification.code)}`" if notification.code else "",
            f"`{f(explain_command(target))}` for the full reasoning",
            f"channel {f(channel)}" if channel else "",
        )
    )
    text = f"[{notification.severity.value}] {f(notification.title)} · {f(target)}: {reason}"
    return {"text": _cut(slack_escape(one_line(text)), MAX_TEXT), "blocks": blocks[:MAX_BLOCKS]}


# ----- daily digest ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DigestEntry:
    """One target's line in the daily digest."""

    target: str
    phase: str
    active_config: str
    gain: str = ""
    candidate: str | None = None
    canary_weight: int = 0
    rollouts: int = 0
    rollbacks: int = 0
    note: str = ""


def digest_message(day: date, entries: Sequence[DigestEntry], *, channel: str = "") -> Message:
    """The daily digest: one line per target (phase, active config, gain, rollout activity)."""
    blocks: list[Block] = [_header(f"Shiftlight daily digest · {day.isoformat()}")]
    if not entries:
        blocks.append(_section("No TunedServices."))
    total_rollouts = sum(e.rollouts for e in entries)
    total_rollbacks = sum(e.rollbacks for e in entries)
    blocks.append(
        _section(
            f"*{len(entries)}* targets · *{total_rollouts}* rollouts finished · *{total_rollbacks}* rollbacks "
            "in the last 24 h"
        )
    )
    for entry in entries[: MAX_BLOCKS - 4]:
        line = f"*{f(entry.target)}* · {f(entry.phase)} · `{f(entry.active_config)}`"
        if entry.gain:
            line += f" · {f(entry.gain)} vs stock"
        if entry.candidate:
            line += f"\n→ rolling out `{f(entry.candidate)}` at {entry.canary_weight}%"
        if entry.note:
            line += f"\n{f(entry.note)}"
        blocks.append(_section(line))
    blocks.append(_context("`shiftctl get -A` for the live view", f"channel {f(channel)}" if channel else ""))
    text = f"Shiftlight daily digest {day.isoformat()}: {len(entries)} targets, {total_rollbacks} rollbacks"
    return {"text": slack_escape(one_line(text)), "blocks": blocks[:MAX_BLOCKS]}


def digest_entry(target: TargetRef, status: TargetStatus, *, rollouts: int = 0, rollbacks: int = 0) -> DigestEntry:
    """A digest line from a target's status (same summary values as ``kubectl get ts``)."""
    summary = models.summarize(status)
    return DigestEntry(
        target=str(target),
        phase=status.phase.value,
        active_config=summary.active_config,
        gain=summary.gain,
        candidate=summary.candidate_config,
        canary_weight=summary.canary_weight,
        rollouts=rollouts,
        rollbacks=rollbacks,
        note=status.frozen_reason or (status.last_reasons[-1].message if status.last_reasons else ""),
    )
