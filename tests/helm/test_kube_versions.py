"""The chart installs on every Kubernetes version it claims (``Chart.yaml``'s ``kubeVersion``: 1.27 and later).

Each rendered object is validated offline (``kubernetes-validate``, strict: unknown fields are errors) against the
schemas of the lowest claimed version and of the newest version the validator knows, with the default values and with
every optional feature on. The approval admission policy (``admissionregistration.k8s.io/v1``
ValidatingAdmissionPolicy, served from 1.30) is rendered only where the cluster serves it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from .conftest import CHART, Helm, by_kind

pytestmark = pytest.mark.helm

VALUES = Path(__file__).resolve().parent / "values-all-features.yaml"
LOWEST = "1.27.0"
NEWEST = kubernetes_validate.latest_version()
POLICY = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"


def claimed_lowest() -> str:
    claim = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    return str(claim).removeprefix(">=").removesuffix("-0")


def render(helm: Helm, version: str, *args: str) -> list[dict[str, Any]]:
    """The chart as ``helm install`` renders it on a cluster of ``version`` (its discovery lists the policy kind
    from 1.30 on)."""
    served = ["--api-versions", POLICY] if tuple(map(int, version.split(".")[:2])) >= (1, 30) else []
    return helm.template("--kube-version", version, *served, *args)


def test_the_lowest_version_tested_is_the_one_the_chart_claims() -> None:
    assert claimed_lowest() == LOWEST


@pytest.mark.parametrize("version", [LOWEST, NEWEST])
@pytest.mark.parametrize("values", [[], ["-f", str(VALUES)]], ids=["defaults", "all-features"])
def test_every_rendered_object_is_valid_for_the_version(helm: Helm, version: str, values: list[str]) -> None:
    docs = render(helm, version, *values)
    assert len(docs) > 10
    for doc in docs:
        where = f"{doc['kind']} {doc['metadata']['name']} on Kubernetes {version}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{where}: {exc.message} at {'.'.join(map(str, exc.path))}") from None


@pytest.mark.parametrize(("version", "rendered"), [(LOWEST, 0), ("1.29.9", 0), ("1.30.0", 1), (NEWEST, 1)])
def test_the_admission_policy_is_rendered_only_where_it_is_served(helm: Helm, version: str, rendered: int) -> None:
    docs = helm.template("--kube-version", version)
    assert len(by_kind(docs, "ValidatingAdmissionPolicy")) == rendered
    assert len(by_kind(docs, "ValidatingAdmissionPolicyBinding")) == rendered


def test_a_cluster_whose_discovery_lists_the_policy_gets_it(helm: Helm) -> None:
    """A 1.29 cluster with the v1 API switched on (or any cluster helm asks) lists the kind: it is rendered."""
    docs = helm.template("--kube-version", "1.29.0", "--api-versions", POLICY)
    assert len(by_kind(docs, "ValidatingAdmissionPolicy")) == 1


def test_off_is_off_on_every_version(helm: Helm) -> None:
    docs = render(helm, NEWEST, "--set", "approvals.admissionPolicy.enabled=false")
    assert by_kind(docs, "ValidatingAdmissionPolicy") == []
