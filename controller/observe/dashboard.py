"""Generate the Grafana dashboard from :mod:`controller.observe.dashboard_queries`, so panels and decisions share
their PromQL.

    python -m controller.observe.dashboard            # writes charts/grafana/shiftlight-dashboard.json
    python -m controller.observe.dashboard --check    # exit 1 when the committed file is out of date

Every panel target is a query from :func:`controller.observe.dashboard_queries.dashboard_queries`, rendered with Grafana
variables (``$namespace``, ``$model``, ``$__rate_interval``) in place of a concrete target and window.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from controller.observe import promql
from controller.observe.dashboard_queries import dashboard_queries

OUTPUT = Path(__file__).resolve().parents[2] / "charts" / "grafana" / "shiftlight-dashboard.json"
SELECTOR = promql.Selector(model_name="$model", namespace="$namespace")
RANGE = "$__rate_interval"
UID = "shiftlight-observe"

# (row title, [(panel title, unit, [(query name, legend)])])
LAYOUT: list[tuple[str, list[tuple[str, str, list[tuple[str, str]]]]]] = [
    (
        "Traffic shape",
        [
            ("Arrival rate", "reqps", [("arrival_rate", "all"), ("v_arrival_rate", "{{variant}}")]),
            (
                "Concurrency",
                "short",
                [
                    ("concurrency_littles_law", "Little's law"),
                    ("running_mean", "running"),
                    ("waiting_mean", "waiting"),
                ],
            ),
            (
                "Prompt / output tokens (mean)",
                "short",
                [("prompt_mean", "prompt mean"), ("output_mean", "output mean")],
            ),
            (
                "Prompt / output tokens (p50, p90; coarse buckets)",
                "short",
                [
                    ("prompt_tokens_p50", "prompt p50"),
                    ("prompt_tokens_p90", "prompt p90"),
                    ("output_tokens_p50", "output p50"),
                    ("output_tokens_p90", "output p90"),
                ],
            ),
        ],
    ),
    (
        "SLO",
        [
            (
                "TTFT by variant",
                "s",
                [
                    ("v_ttft_p50", "p50 {{variant}}"),
                    ("v_ttft_p95", "p95 {{variant}}"),
                    ("v_ttft_p99", "p99 {{variant}}"),
                ],
            ),
            (
                "TPOT by variant",
                "s",
                [
                    ("v_tpot_p50", "p50 {{variant}}"),
                    ("v_tpot_p95", "p95 {{variant}}"),
                    ("v_tpot_p99", "p99 {{variant}}"),
                ],
            ),
            (
                "Good-request ratio (TTFT <= $ttft_bound, TPOT <= $tpot_bound)",
                "percentunit",
                [("v_ttft_good_ratio", "TTFT {{variant}}"), ("v_tpot_good_ratio", "TPOT {{variant}}")],
            ),
            ("Error ratio", "percentunit", [("v_error_ratio", "{{variant}}")]),
            ("Output tokens/s", "short", [("output_tokens_per_s", "all"), ("v_output_tokens_per_s", "{{variant}}")]),
        ],
    ),
    (
        "Speculative decoding",
        [
            (
                "Acceptance rate",
                "percentunit",
                [("spec_acceptance_rate", "all"), ("v_spec_acceptance_rate", "{{variant}}")],
            ),
            ("Mean acceptance length", "short", [("spec_mean_acceptance_length", "tokens per step")]),
            (
                "Acceptance by draft position",
                "percentunit",
                [("spec_acceptance_per_position", "position {{position}}")],
            ),
        ],
    ),
    (
        "Cache and memory",
        [
            ("Prefix-cache hit rate", "percentunit", [("prefix_cache_hit_rate", "hit rate")]),
            ("KV-cache usage", "percentunit", [("kv_usage_mean", "mean"), ("kv_usage_max", "max")]),
            ("Preemptions/s", "short", [("preemptions_per_s", "preemptions")]),
        ],
    ),
    (
        "Shiftlight",
        [
            ("Decisions", "short", [("shiftlight_decisions", "{{decision}}")]),
            ("Rollout weight (candidate %)", "percent", [("shiftlight_rollout_weight", "{{variant}}")]),
            ("Trials", "short", [("shiftlight_trials", "{{outcome}}")]),
        ],
    ),
]


def _templating() -> dict[str, Any]:
    def query_var(name: str, label: str, metric: str) -> dict[str, Any]:
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": f"label_values({metric}, {label})", "refId": f"{name}-var"},
            "refresh": 2,
            "includeAll": False,
            "multi": False,
        }

    def custom(name: str, values: list[str], default: str) -> dict[str, Any]:
        return {
            "name": name,
            "type": "custom",
            "query": ",".join(values),
            "current": {"text": default, "value": default},
            "options": [{"text": v, "value": v, "selected": v == default} for v in values],
        }

    return {
        "list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            query_var("namespace", "namespace", promql.RUNNING),
            query_var("model", "model_name", f'{promql.RUNNING}{{namespace="$namespace"}}'),
            custom("ttft_bound", ["0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "10.0"], "2.5"),
            custom("tpot_bound", ["0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.5"], "0.1"),
        ]
    }


def build() -> dict[str, Any]:
    by_name = {query.name: query for query in dashboard_queries(SELECTOR, RANGE)}
    panels: list[dict[str, Any]] = []
    panel_id = 1
    y = 0
    for row_title, row_panels in LAYOUT:
        panels.append({"id": panel_id, "type": "row", "title": row_title, "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        panel_id += 1
        y += 1
        width = 24 // min(len(row_panels), 4)
        for i, (title, unit, targets) in enumerate(row_panels):
            x = (i % 4) * width
            if i and i % 4 == 0:
                y += 8
            panels.append(
                {
                    "id": panel_id,
                    "type": "timeseries",
                    "title": title,
                    "description": "; ".join(by_name[name].description for name, _ in targets),
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "gridPos": {"h": 8, "w": width, "x": x, "y": y},
                    "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                    "targets": [
                        {
                            "refId": chr(ord("A") + k),
                            "expr": by_name[name].expr,
                            "legendFormat": legend,
                            "datasource": {"type": "prometheus", "uid": "${datasource}"},
                        }
                        for k, (name, legend) in enumerate(targets)
                    ],
                }
            )
            panel_id += 1
        y += 8
    return {
        "uid": UID,
        "title": "Shiftlight: traffic shape, SLO and speculative decoding",
        "description": "Generated by `python -m controller.observe.dashboard` from controller/observe/queries.py.",
        "tags": ["shiftlight", "vllm"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": _templating(),
        "annotations": _annotations(),
        "panels": panels,
    }


#: Tags every Shiftlight decision mark on this dashboard carries (see :mod:`controller.adapters.notify.grafana`).
ANNOTATION_TAGS = ("shiftlight", f"dashboard:{UID}")


def _annotations() -> dict[str, Any]:
    """Grafana's own annotations (off: the decision marks posted for this dashboard would show twice) and the
    Shiftlight decisions, selected by their tags."""
    grafana = {"type": "grafana", "uid": "-- Grafana --"}
    return {
        "list": [
            {
                "builtIn": 1,
                "datasource": grafana,
                "enable": False,
                "hide": True,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "type": "dashboard",
            },
            {
                "datasource": grafana,
                "enable": True,
                "iconColor": "#FF9830",
                "name": "Shiftlight decisions",
                "target": {"type": "tags", "tags": list(ANNOTATION_TAGS), "matchAny": False, "limit": 500},
            },
        ]
    }


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the Shiftlight Grafana dashboard from queries.py")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true", help="fail if the file differs from a fresh generation")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python -m controller.observe.dashboard", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
