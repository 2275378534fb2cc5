"""Tenant strings stay values: a policy's name, a TunedService's model and served model name are held to character
patterns, a model name is never read as a flag on vLLM's command line, and every message built from tenant text
(the policy CLI's output, Events, condition messages, text logs) reaches the reader without controls or invisible
format characters."""

from __future__ import annotations

import copy
import io
import logging
import subprocess
import sys
import unicodedata
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from controller.adapters.kube.manifests import engine_container, event_manifest
from controller.adapters.kube.pod_template import PodSource, derive_pod_template, engine_invocation
from controller.adapters.kube.status import Refusal, refusal_conditions
from controller.crd import schema
from controller.crd.models import parse_tuned_service
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.text import block, one_line
from controller.errors import InvalidInput
from controller.policy.loading import PolicyError, parse_policy
from controller.reactor.logs import log_formatter
from controller.reactor.settings import OperatorSettings
from tests.support.crd_schema import crd_schema

pytestmark = pytest.mark.security

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "charts" / "shiftlight" / "crds" / "tunedservices.shiftlight.dev.yaml"
ESC, BEL, ZWSP = "\x1b", "\x07", "\u200b"
HOSTILE_NAMES = {
    "esc": f"ok{ESC}[2Jcleared",
    "osc52": f"ok{ESC}]52;c;ZWNobyBwd25lZA=={BEL}",
    "c1-csi": "ok\x9b31mred",
    "zwsp": f"sre{ZWSP}-lead",
    "bidi": "evil\u202etxt",
    "space": "my policy",
    "leading-dash": "-x",
}
#: Bytes a terminal obeys or hides: C0 controls but newline, DEL, C1 (as UTF-8), and ZWSP, the bidi override and
#: the word joiner (as UTF-8).
RAW = [bytes([c]) for c in range(0x20) if c != 0x0A] + [b"\x7f"]
RAW += [chr(c).encode() for c in range(0x80, 0xA0)] + ["\u200b".encode(), "\u202e".encode(), "\u2060".encode()]


def raw_in(data: bytes) -> list[bytes]:
    return [r for r in RAW if r in data]


def quoted(name: str) -> str:
    """``name`` as a YAML double-quoted scalar: escapes carry the controls past YAML's reader."""
    return '"' + name.encode("unicode_escape").decode().replace('"', '\\"') + '"'


@pytest.mark.parametrize("name", HOSTILE_NAMES.values(), ids=HOSTILE_NAMES.keys())
def test_a_policy_name_outside_the_pattern_is_refused_naming_the_field(name: str) -> None:
    text = f"name: {quoted(name)}\n"
    assert yaml.safe_load(text)["name"] == name  # the name does reach the model
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, source="configmap prod/tuning:policy.yaml")
    assert raised.value.field == "name" and raised.value.limit == ""
    assert raw_in(str(raised.value).encode()) == []


def test_real_policy_names_are_accepted() -> None:
    for name in ("default", "dense-8b-h200", "hybrid-mtp-workstation", "doc_quoting.3090", "A1"):
        assert parse_policy(f"name: {name}\n").name == name


def test_the_policy_cli_prints_no_raw_control_bytes(tmp_path: Path) -> None:
    named = tmp_path / "named.yaml"
    named.write_text(f"name: {quoted(HOSTILE_NAMES['osc52'])}\n")
    keyed = tmp_path / "keyed.yaml"  # an unknown key is quoted back in the error
    keyed.write_text(f"{quoted(ESC + '[2J' + ZWSP + 'x')}: 1\nspace: {{{quoted('a' + chr(0x9B) + 'b')}: [1]}}\n")
    good = tmp_path / "good.yaml"
    good.write_text("name: fine\nspace:\n  max_num_seqs: [64, 128]\n")
    ran = subprocess.run(
        [sys.executable, "-m", "controller.policy", "check", str(named), str(keyed), str(good)],
        capture_output=True,
        cwd=REPO,
        check=False,
    )
    assert ran.returncode == 1
    assert raw_in(ran.stdout) == [] and raw_in(ran.stderr) == []
    assert b"named.yaml:1: name:" in ran.stderr and b"keyed.yaml" in ran.stderr
    assert b"good.yaml: ok (fine," in ran.stdout


def crd_errors(body: dict[str, Any]) -> list[str]:
    """What the API server refuses in ``body``, by the committed CRD (``charts/shiftlight/crds``)."""
    validator = jsonschema.Draft4Validator(schema.to_json_schema(crd_schema(CRD, "v1alpha1"), forbid_unknown=True))
    return [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.validator}" for e in validator.iter_errors(body)]


def tuned_service(model: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((REPO / "examples" / "tunedservice.yaml").read_text())
    body = copy.deepcopy(body)
    body["spec"]["model"] = model
    return body


GOOD_MODELS = ["meta-llama/Llama-3.1-8B-Instruct", "org/model-name", "/models/llama", "s3://bucket/qwen", "m"]
FLAG_MODELS = ["--trust-remote-code", "-h", "--model=/etc/passwd"]


@pytest.mark.parametrize("name", GOOD_MODELS)
def test_model_names_people_use_are_accepted(name: str) -> None:
    body = tuned_service({"name": name, "servedModelName": name})
    assert crd_errors(body) == []
    spec, _ = parse_tuned_service(body)
    assert (spec.model.name, spec.model.served_model_name) == (name, name)


@pytest.mark.parametrize("name", FLAG_MODELS)
@pytest.mark.parametrize(
    ("key", "field"), [("name", "spec.model.name"), ("servedModelName", "spec.model.servedModelName")]
)
def test_a_model_name_that_is_a_flag_is_refused_by_the_crd_and_the_operator(name: str, key: str, field: str) -> None:
    model = {"name": "org/model-name", key: name}
    body = tuned_service(model)
    assert crd_errors(body) == [f"spec.model.{key}: pattern"]
    with pytest.raises(InvalidInput) as raised:
        parse_tuned_service(body)
    assert raised.value.field == field


BARE_POD = {"metadata": {"labels": {"app": "m"}}, "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm"}]}}


def test_the_pod_template_builder_refuses_a_model_name_that_is_a_flag() -> None:
    source = PodSource(BARE_POD, where="deployment prod/m")
    assert engine_invocation(source, fallback_model="org/model-name").model == "org/model-name"
    with pytest.raises(InvalidInput) as raised:
        engine_invocation(source, fallback_model="--trust-remote-code")
    assert raised.value.field == "spec.model.name"
    with pytest.raises(InvalidInput) as served:
        derive_pod_template(
            source,
            EngineConfig(),
            variant="candidate",
            labels={},
            served_model_name="--trust-remote-code",
            fallback_model="org/model-name",
        )
    assert served.value.field == "spec.model.servedModelName"
    for model, served_name, field in (
        ("--trust-remote-code", None, "spec.model.name"),
        ("org/model-name", "--trust-remote-code", "spec.model.servedModelName"),
    ):
        with pytest.raises(InvalidInput) as bare:
            engine_container(EngineConfig(), model=model, image="vllm/vllm", served_model_name=served_name)
        assert bare.value.field == field
    args = engine_container(EngineConfig(), model="org/model-name", image="vllm/vllm")["args"]
    assert args[:2] == ["serve", "org/model-name"] and "--trust-remote-code" not in args


def test_every_invisible_format_character_is_dropped() -> None:
    assert one_line(f"Approved by sre{ZWSP}-lead") == "Approved by sre-lead"
    assert block(f"sre{ZWSP}-lead\nnext") == "sre-lead\nnext"
    format_chars = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert len(format_chars) > 150
    assert one_line("a" + "".join(format_chars) + "b") == "ab"
    assert one_line(f"{ESC}]52;c;ZWNobw=={BEL}\x9b2J") == "]52;c;ZWNobw==2J"  # what is left is visible


TENANT = f"policy sre{ZWSP}-lead{ESC}]52;c;eA=={BEL}\x9b31m\u202e\nApproved by admin"


def test_events_and_condition_messages_carry_no_controls() -> None:
    target = TargetRef(namespace="prod", name="workhorse", model="m")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    event = event_manifest(target, reason="InvalidPolicy", message=TENANT, warning=True, uid=None, now=now)
    assert raw_in(event["message"].encode()) == [] and "\n" not in event["message"]
    assert "sre-lead" in event["message"]
    for condition in refusal_conditions(Refusal("InvalidPolicy", TENANT), generation=1, now=now):
        assert raw_in(condition.message.encode()) == []
        assert condition.message.splitlines()[-1] == "Approved by admin"  # a line break stays a line break


def test_text_logs_carry_no_controls_and_stay_one_line() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(log_formatter(OperatorSettings(log_format="text")))
    logger = logging.getLogger("shiftlight.test.tenant-strings")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        logger.warning("prod/workhorse: InvalidPolicy: %s", TENANT)
        try:
            raise ValueError(TENANT)
        except ValueError:
            logger.exception("refused")
    finally:
        logger.removeHandler(handler)
    written = stream.getvalue()
    assert raw_in(written.encode()) == []
    first, *rest = written.splitlines()
    assert first.endswith("InvalidPolicy: policy sre-lead]52;c;eA==31m Approved by admin")
    assert rest[0].endswith(" refused") and rest[1].startswith("Traceback")
