"""The query module: escaping, label-name checks, batching; the dashboard is generated from it."""

from __future__ import annotations

import json

import pytest

from controller.observe import dashboard, promql
from controller.observe import queries as q
from controller.observe.dashboard_queries import dashboard_queries


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain", "plain"),
        ('a"b', 'a\\"b'),
        ("back\\slash", "back\\\\slash"),
        ("new\nline", "new\\nline"),
        ('x"}) or vector(1) or ({y="', 'x\\"}) or vector(1) or ({y=\\"'),
        ("tab\tbell\x07", "tab\\tbell\\x07"),
        ("ünï{cöde}", "ünï{cöde}"),
    ],
)
def test_label_values_are_escaped(raw: str, escaped: str) -> None:
    assert promql.escape_label_value(raw) == escaped
    assert promql.Selector(model_name=raw).matchers() == '{model_name="' + escaped + '"}'


@pytest.mark.parametrize("bad", ["", "1abc", "a-b", 'a"', "a b", "x}"])
def test_label_names_are_checked(bad: str) -> None:
    with pytest.raises(ValueError, match="label name"):
        promql.Selector(model_name="m", labels=((bad, "v"),))


@pytest.mark.parametrize("bad", ["5", "5m]", "5m) or vector(1", "$__x]"])
def test_ranges_are_checked(bad: str) -> None:
    with pytest.raises(ValueError, match="range"):
        promql.rate(promql.REQUEST_SUCCESS, promql.Selector(model_name="m"), bad)


def test_selector_carries_namespace_and_deployment_labels_sorted() -> None:
    sel = promql.Selector.of("llama", "prod", {"team": "a", "app": "chat"})
    assert sel.matchers() == '{model_name="llama",namespace="prod",app="chat",team="a"}'


def test_batch_tags_every_query_once() -> None:
    queries = q.observe_queries(promql.Selector(model_name="m"), "300s")
    text = promql.batch(queries)
    assert text.count("label_replace(") == len(queries)
    assert all(f'"{promql.QUERY_TAG}", "{x.name}"' in text for x in queries)
    assert len({x.name for x in queries}) == len(queries)


def test_tpot_comes_from_per_request_histogram_not_itl() -> None:
    exprs = " ".join(x.expr for x in dashboard_queries(promql.Selector(model_name="m"), "5m"))
    assert "request_time_per_output_token_seconds" in exprs
    assert "inter_token_latency" not in exprs


def test_committed_dashboard_equals_fresh_generation() -> None:
    assert dashboard.OUTPUT.read_text() == dashboard.render()
    assert dashboard.main(["--check"]) == 0


def test_every_panel_expr_comes_from_queries_module() -> None:
    allowed = {x.expr for x in dashboard_queries(dashboard.SELECTOR, dashboard.RANGE)}
    board = json.loads(dashboard.OUTPUT.read_text())
    targets = [t for p in board["panels"] if p["type"] != "row" for t in p["targets"]]
    assert len(targets) >= 30
    assert all(t["expr"] in allowed for t in targets)
    titles = {p["title"] for p in board["panels"] if p["type"] == "row"}
    assert titles == {"Traffic shape", "SLO", "Speculative decoding", "Cache and memory", "Shiftlight"}
    exprs = " ".join(t["expr"] for t in targets)
    for metric in ("shiftlight_decisions_total", "shiftlight_rollout_weight", "shiftlight_trials_total"):
        assert metric in exprs


def test_docs_list_every_query() -> None:
    docs = (dashboard.OUTPUT.parents[2] / "docs" / "observe.md").read_text()
    sel = promql.Selector(model_name="$model", namespace="$namespace")
    everything = dashboard_queries(sel, "$range") + q.profile_queries(sel, "$step")
    missing = [x.name for x in everything if f"`{x.name}`" not in docs or x.expr not in docs]
    assert not missing
