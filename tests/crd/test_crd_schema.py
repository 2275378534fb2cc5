"""CRDs generated from the models: committed files up to date, structural, printer columns, CRs validate."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from controller.crd import generate, models, schema
from controller.domain.codes import Code
from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig
from controller.domain.traffic import TimeWindow
from controller.domain.trial import Percentiles, QualityReport, SpecDecodeStats, TrialResult, TrialStatus
from controller.errors import InvalidInput

from .test_crd_models import CANDIDATE, SHAPE, example, rolling_status

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "charts" / "shiftlight" / "crds"
FORBIDDEN = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "const", "prefixItems", "title", "uniqueItems"}


def crds() -> dict[str, dict[str, Any]]:
    return {crd["spec"]["names"]["kind"]: crd for crd in schema.all_crds()}


def open_api(kind: str) -> dict[str, Any]:
    result: dict[str, Any] = crds()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return result


def validator(kind: str) -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(
        schema.to_json_schema(open_api(kind), forbid_unknown=True), format_checker=jsonschema.FormatChecker()
    )


def nodes(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, sub in node.get("properties", {}).items():
            yield from nodes(sub, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                yield from nodes(node[key], f"{path}[]")


def test_committed_crds_are_up_to_date() -> None:
    for crd in schema.all_crds():
        committed = CRD_DIR / generate.file_name(crd)
        assert committed.read_text() == generate.render(crd), (
            f"{committed} is stale: run python -m controller.crd.generate charts/shiftlight/crds"
        )
    assert sorted(p.name for p in CRD_DIR.glob("*.yaml")) == [
        "configrollouts.shiftlight.dev.yaml",
        "trials.shiftlight.dev.yaml",
        "tunedservices.shiftlight.dev.yaml",
    ]


def test_generator_writes_the_same_files(tmp_path: Path) -> None:
    written = generate.write_crds(tmp_path / "crds")
    assert len(written) == 3
    for path in written:
        assert path.read_text() == (CRD_DIR / path.name).read_text()
        assert yaml.safe_load(path.read_text())["kind"] == "CustomResourceDefinition"


@pytest.mark.parametrize("kind", ["TunedService", "Trial", "ConfigRollout"])
def test_schemas_are_structural(kind: str) -> None:
    root = open_api(kind)
    count = 0
    for path, node in nodes(root):
        count += 1
        assert not FORBIDDEN & node.keys(), f"{kind}{path}: {FORBIDDEN & node.keys()}"
        assert "type" in node, f"{kind}{path} has no type"
        assert node["type"] in {"object", "array", "string", "integer", "number", "boolean"}, f"{kind}{path}"
        assert node.get("additionalProperties") is not False, f"{kind}{path}"
        assert not ("properties" in node and "additionalProperties" in node), f"{kind}{path}"
        assert "x-kubernetes-preserve-unknown-fields" not in node, f"{kind}{path}"
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            if bound in node:
                assert node[bound] is True and ("minimum" if "Min" in bound else "maximum") in node
        if node["type"] == "array":
            assert "items" in node, f"{kind}{path}"
        if "default" in node:  # the apiserver requires defaults to validate against their own schema
            jsonschema.Draft4Validator(schema.to_json_schema(node)).validate(node["default"])
    assert count > 50


def test_crd_metadata_names_columns_and_subresources() -> None:
    ts = crds()["TunedService"]
    assert ts["metadata"]["name"] == "tunedservices.shiftlight.dev"
    assert ts["spec"]["group"] == "shiftlight.dev" and ts["spec"]["scope"] == "Namespaced"
    assert ts["spec"]["names"]["shortNames"] == ["ts"]
    assert crds()["ConfigRollout"]["spec"]["names"]["shortNames"] == ["cro"]
    for crd in crds().values():
        (version,) = crd["spec"]["versions"]
        assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
        assert version["subresources"] == {"status": {}}
        conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map" and conditions["x-kubernetes-list-map-keys"] == ["type"]
        assert set(conditions["items"]["required"]) == {"type", "status"}
        assert version["additionalPrinterColumns"][-1]["name"] == "Age"
    columns = [
        (c["name"], c["jsonPath"], c.get("priority", 0)) for c in ts["spec"]["versions"][0]["additionalPrinterColumns"]
    ]
    assert columns == [
        ("Phase", ".status.phase", 0),
        ("Active", ".status.summary.activeConfig", 0),
        ("Candidate", ".status.summary.candidateConfig", 1),
        ("Weight", ".status.summary.canaryWeight", 0),
        ("Gain", ".status.summary.gain", 0),
        ("Dry-Run", ".spec.dryRun", 1),
        ("Age", ".metadata.creationTimestamp", 0),
    ]


def resolve(body: dict[str, Any], json_path: str) -> Any:
    node: Any = body
    for key in json_path.strip(".").split("."):
        node = node[key]
    return node


def test_printer_columns_resolve_on_a_real_status() -> None:
    body = example()
    body["metadata"]["creationTimestamp"] = "2026-11-30T08:00:00Z"
    body["status"] = models.status_to_wire(rolling_status(), observed_generation=1)
    validator("TunedService").validate(body)
    columns = crds()["TunedService"]["spec"]["versions"][0]["additionalPrinterColumns"]
    shown = {c["name"]: resolve(body, c["jsonPath"]) for c in columns}
    assert shown == {
        "Phase": "RollingOut",
        "Active": "stock",
        "Candidate": "ngram3+seqs256",
        "Weight": 50,
        "Gain": "1.56x",
        "Dry-Run": False,
        "Age": "2026-11-30T08:00:00Z",
    }
    kinds = {"string": str, "integer": int, "boolean": bool}
    for column in columns:
        if column["type"] in kinds:
            assert isinstance(shown[column["name"]], kinds[column["type"]])


def test_example_and_full_objects_validate_against_the_crd_schemas() -> None:
    validator("TunedService").validate(example())
    spec, status = models.config_rollout_from_state(rolling_status().rollout, target="llama-8b")  # type: ignore[arg-type]
    validator("ConfigRollout").validate(
        {
            "apiVersion": models.API_VERSION,
            "kind": "ConfigRollout",
            "metadata": {"name": "r"},
            "spec": spec.to_wire(),
            "status": status.to_wire(),
        }
    )
    trial = models.TrialSpec(target="llama-8b", config=CANDIDATE, shape=SHAPE)
    validator("Trial").validate(
        {
            "apiVersion": models.API_VERSION,
            "kind": "Trial",
            "metadata": {"name": "t"},
            "spec": trial.to_wire(),
            "status": models.TrialCRStatus().to_wire(),
        }
    )


@pytest.mark.parametrize(
    ("path", "value", "keyword"),
    [
        (("workload", "deployments"), ["Bad_Name"], "pattern"),
        (("workload", "deployments"), [], "minItems"),
        (("workload", "port"), 70000, "maximum"),
        (("approvalMode",), "sometimes", "enum"),
        (("slo", "ttft_seconds"), 0, "minimum"),
        (("gpuType",), 7, "type"),
        (("typo",), True, "additionalProperties"),
    ],
)
def test_bad_crs_are_rejected_by_the_schema_and_by_the_models(path: tuple[str, ...], value: Any, keyword: str) -> None:
    body = copy.deepcopy(example())
    node = body["spec"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    errors = list(validator("TunedService").iter_errors(body))
    assert [e.validator for e in errors] == [keyword]
    with pytest.raises(InvalidInput):
        models.parse_tuned_service(body)


@pytest.mark.parametrize("kind", ["TunedService", "Trial", "ConfigRollout"])
def test_crds_pass_kubernetes_validate_strict(kind: str) -> None:
    assert kubernetes_validate.validate(crds()[kind], "1.37.0", strict=True)


def test_a_rich_status_validates_and_round_trips() -> None:
    measured = TrialResult(
        config=CANDIDATE,
        shape=SHAPE.model_copy(update={"window": TimeWindow(name="day", start_hour=8, end_hour=20)}),
        slo=SLO(),
        status=TrialStatus.MEASURED,
        source="kubernetes",
        completed=500,
        output_tokens_per_s=1650.5,
        goodput_tokens_per_s=1590.0,
        ttft_s=Percentiles(p50=0.2, p95=0.43, p99=0.6),
        tpot_s=Percentiles(p50=0.02, p95=0.0285, p99=0.04),
        spec_decode=SpecDecodeStats(acceptance_rate=0.7, mean_acceptance_length=3.1, per_position=(0.9, 0.7, 0.5)),
        quality=QualityReport(exact_match_rate=1.0, mean_logprob_divergence=0.0, prompts=20, passed=True),
        log_tail=("INFO started",),
    )
    infeasible = TrialResult(
        config=EngineConfig(kv_cache_dtype="fp8"),
        shape=SHAPE,
        slo=SLO(),
        status=TrialStatus.INFEASIBLE,
        reason="fp8 KV cache requires AVX-512",
    )
    entry = ScheduledConfig(
        window="day", config=CANDIDATE, shape=SHAPE, goodput_tokens_per_s=1590, stock_goodput_tokens_per_s=1020
    )
    status = rolling_status().model_copy(
        update={"trials": (measured, infeasible), "schedule": (entry,), "tuned_shape": SHAPE, "history": ("a",)}
    )
    body = example()
    body["status"] = models.status_to_wire(status, observed_generation=2)
    validator("TunedService").validate(body)
    assert models.parse_tuned_service(body)[1] == status
    trial_status = models.TrialCRStatus(phase="Succeeded", config_label=CANDIDATE.label(), result=measured)
    trial = models.TrialSpec(target="llama-8b", config=CANDIDATE, shape=SHAPE)
    validator("Trial").validate(
        {
            "apiVersion": models.API_VERSION,
            "kind": "Trial",
            "metadata": {"name": "t"},
            "spec": trial.to_wire(),
            "status": trial_status.to_wire(),
        }
    )


def test_generator_cli_writes_crds_and_copies_shared_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    (repo / "charts" / "grafana").mkdir(parents=True)
    (repo / "charts" / "grafana" / "shiftlight-dashboard.json").write_text('{"title": "Shiftlight"}\n')
    (repo / "policies" / "v1").mkdir(parents=True)
    (repo / "policies" / "v1" / "default.yaml").write_text("version: 1\nname: default\n")
    (repo / "policies" / "schema.json").write_text("{}")  # not a preset: not copied
    chart = repo / "charts" / "shiftlight"
    assert generate.main([str(chart / "crds"), "--repo", str(repo)]) == 0
    assert sorted(p.name for p in (chart / "crds").iterdir()) == sorted(
        generate.file_name(c) for c in schema.all_crds()
    )
    assert (chart / "dashboards" / "shiftlight-dashboard.json").read_text() == '{"title": "Shiftlight"}\n'
    assert (chart / "policies" / "v1" / "default.yaml").read_text() == "version: 1\nname: default\n"
    assert not (chart / "policies" / "schema.json").exists()
    out = capsys.readouterr().out
    assert out.count("wrote ") == 3 and out.count("copied ") == 2


def test_stored_codes_the_operator_does_not_know_pass_the_schema_and_load() -> None:
    """The schema stores a code as a kebab-case string, not a list of codes: a status an older operator wrote
    (``code: ""``) or a newer one (a code this version lacks) is still stored and read back."""
    body = example()
    body["status"] = models.status_to_wire(rolling_status(), observed_generation=2)
    body["status"]["last_reasons"] = [
        {"code": "", "message": "stored before codes were optional"},
        {"code": "warp-drive", "message": "a newer operator's reason"},
        {"code": None, "message": "no code"},
        {"code": "slo-breach", "message": "p95 over"},
    ]
    validator("TunedService").validate(body)
    _, status = models.parse_tuned_service(body)
    assert [r.code for r in status.last_reasons] == [None, None, None, Code.SLO_BREACH]
    assert status.last_reasons[1].message == "[warp-drive] a newer operator's reason"
    body["status"]["last_reasons"] = [{"code": "SloBreach", "message": "not a stored code's spelling"}]
    with pytest.raises(jsonschema.ValidationError, match="does not match"):
        validator("TunedService").validate(body)


def test_an_invalid_trials_miss_codes_validate_and_round_trip() -> None:
    invalid = TrialResult(
        config=CANDIDATE,
        shape=SHAPE,
        slo=SLO(),
        status=TrialStatus.INVALID,
        reason="the load generator did not keep its plan: loop-stalled: the client's event loop stopped",
        invalid_codes=(Code.LOOP_STALLED,),
    )
    body = example()
    body["status"] = models.status_to_wire(rolling_status().model_copy(update={"trials": (invalid,)}))
    validator("TunedService").validate(body)
    assert body["status"]["trials"][0]["invalid_codes"] == ["loop-stalled"]
    assert models.parse_tuned_service(body)[1].trials == (invalid,)
