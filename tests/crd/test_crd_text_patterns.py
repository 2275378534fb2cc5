"""The TunedService names its model and GPU type within patterns, in the CRD (the API server refuses) and in the
models (the operator refuses): these strings reach terminals and Slack, so no control character, escape sequence,
bidi control, space, bracket or angle bracket gets in at all."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.crd import models
from controller.errors import InvalidInput

from .test_crd_models import example
from .test_crd_schema import validator

pytestmark = pytest.mark.security

GOOD_MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "/models/llama",
    "s3://bucket/qwen2.5-7b",
    "org/m@v1.0",
    "m",
    "a_b+c",
]
GOOD_GPUS = ["H100-80GB", "gb300-dgx-station", "h200", "L4", "mi300x_192.gb"]
HOSTILE = [
    "llama\x1b[2J",
    "llama\nApproved by sre-lead",
    "x\x1b]52;c;eA==\x07",
    "evil\u202etxt.exe",
    "a\u2066b",
    "\x9b31m",
    "[green]Approved[/green]",
    "<!channel>",
    "my model",
    "",
]


def with_spec(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(example())
    node = body["spec"]
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return body


@pytest.mark.parametrize(
    ("path", "value"),
    [(("model", "name"), v) for v in GOOD_MODELS] + [(("gpuType",), v) for v in GOOD_GPUS],
)
def test_real_names_are_accepted(path: tuple[str, ...], value: str) -> None:
    body = with_spec(path, value)
    assert list(validator("TunedService").iter_errors(body)) == []
    models.parse_tuned_service(body)


@pytest.mark.parametrize(("path", "field"), [(("model", "name"), "spec.model.name"), (("gpuType",), "spec.gpuType")])
@pytest.mark.parametrize("value", HOSTILE)
def test_names_that_could_drive_a_terminal_or_slack_are_refused(path: tuple[str, ...], field: str, value: str) -> None:
    body = with_spec(path, value)
    errors = [e.validator for e in validator("TunedService").iter_errors(body)]
    assert errors and set(errors) <= {"pattern", "minLength"}
    with pytest.raises(InvalidInput) as raised:
        models.parse_tuned_service(body)
    assert raised.value.field == field
