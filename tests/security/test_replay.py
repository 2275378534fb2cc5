"""The trial cache's signing key survives re-rendering the chart.

``helm template`` (what a GitOps tool such as Argo CD runs) has no cluster to look the existing key up in, so a
chart that generates the key renders a new random one every time, and every sync would throw the whole trial cache
away. With ``trials.cacheKey.existingSecret`` (an admin-created Secret) the chart renders no key at all, and two
renders are identical; the operator mounts the named Secret. (Replay of cache entries themselves is refused by the
signed sequence: tests/adapters/kube/canary/test_trial_cache_evidence.py.)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.helm.conftest import Helm

pytestmark = [pytest.mark.helm, pytest.mark.security]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    home: Path = tmp_path_factory.mktemp("helm-home")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    for var, sub in (("XDG_CACHE_HOME", "cache"), ("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data")):
        env[var] = str(home / sub)
        env[f"HELM_{var.split('_')[1]}_HOME"] = str(home / sub / "helm")
    return Helm(env)


def secrets(docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "Secret"]


def key_volume(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    found: dict[str, Any] = next(v for v in volumes if v["name"] == "trial-cache-key")
    return found


def test_with_an_existing_secret_no_random_key_is_rendered_and_renders_are_identical(helm: Helm) -> None:
    args = ("--set", "trials.cacheKey.existingSecret=shiftlight-cache-key", "--set", "trials.cacheKey.secretKey=k")
    first, second = helm.template(*args), helm.template(*args)
    assert not [s for s in secrets(first) if "trial-cache-key" in s["metadata"]["name"]]
    assert first == second
    assert key_volume(first)["secret"]["secretName"] == "shiftlight-cache-key"


def test_without_one_each_render_generates_a_key_the_operator_mounts_and_helm_keeps(helm: Helm) -> None:
    first, second = helm.template(), helm.template()
    (one,), (two,) = (
        [s for s in secrets(docs) if s["metadata"]["name"].endswith("-trial-cache-key")] for docs in (first, second)
    )
    # no cluster to look the key up in: a new one each time (what existingSecret is for)
    assert one["data"]["key"] != two["data"]["key"]
    assert key_volume(first)["secret"]["secretName"] == one["metadata"]["name"]
    # an uninstall (or a GitOps prune) leaves the key in place, so a re-install finds it and keeps the cache valid
    assert one["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
