"""The chart of the simulated day: traffic, configs and tokens/s against the stock config (PNG + HTML)."""

from __future__ import annotations

import base64
import html
from datetime import datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt

from controller.demo.model import TimelinePoint


def write_chart(path: Path, timeline: list[TimelinePoint], events: list[tuple[datetime, str, str]]) -> None:
    times = [p.at for p in timeline]
    fig, (ax_traffic, ax_tokens, ax_weight) = plt.subplots(
        3, 1, figsize=(12, 8.5), sharex=True, gridspec_kw={"height_ratios": [1.1, 1.6, 0.8]}
    )
    ax_traffic.plot(times, [p.concurrency for p in timeline], color="#1f77b4", label="concurrent requests")
    ax_traffic.set_ylabel("concurrency")
    ax_rate = ax_traffic.twinx()
    ax_rate.plot(times, [p.prompt_mean for p in timeline], color="#9467bd", alpha=0.6, label="mean prompt tokens")
    ax_rate.set_ylabel("prompt tokens")
    ax_traffic.set_title("Traffic")
    ax_traffic.legend(loc="upper left")
    ax_rate.legend(loc="upper right")

    ax_tokens.plot(times, [p.stock_tokens_per_s for p in timeline], color="#7f7f7f", label="stock vLLM config")
    ax_tokens.plot(times, [p.tokens_per_s for p in timeline], color="#2ca02c", label="Shiftlight")
    ax_tokens.set_ylabel("output tokens/s")
    ax_tokens.set_title("Throughput at the observed concurrency")
    ax_tokens.legend(loc="upper left")

    ax_weight.step(times, [p.candidate_weight for p in timeline], where="post", color="#ff7f0e")
    ax_weight.set_ylabel("candidate %")
    ax_weight.set_ylim(-5, 105)
    ax_weight.set_title("Rollouts (candidate traffic weight) and config switches")
    for at, kind, message in events:
        if kind == "Promote":
            for ax in (ax_tokens, ax_weight):
                ax.axvline(at, color="#2ca02c", linestyle="--", linewidth=1)
            ax_weight.text(at, 50, _label(message), fontsize=6, rotation=90, va="center", ha="right", clip_on=True)
        elif kind == "Rollback":
            for ax in (ax_tokens, ax_weight):
                ax.axvline(at, color="#d62728", linestyle=":", linewidth=1.5)
    ax_weight.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))  # type: ignore[no-untyped-call]
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _label(message: str) -> str:
    # "promoted <label> after N steps: ..." -> "<label>"
    words = message.split()
    return words[1] if len(words) > 1 and words[0] == "promoted" else message[:24]


def write_html(path: Path, png: Path, text: str, summary: str) -> None:
    image = base64.b64encode(png.read_bytes()).decode()
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>Shiftlight demo</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto}"
        "pre{background:#f6f8fa;padding:1em;overflow-x:auto;font-size:13px}</style></head><body>"
        f"<h1>Shiftlight: a simulated day</h1><p><b>{html.escape(summary)}</b></p>"
        f"<img alt='traffic, throughput and rollouts over the day' src='data:image/png;base64,{image}' width='100%'>"
        f"<h2>Report</h2><pre>{html.escape(text)}</pre></body></html>"
    )
