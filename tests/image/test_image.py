"""The operator's OCI image, as `make image` builds it (`scripts/build-image.sh`, the Containerfile's two stages):
run with buildah (vfs storage, chroot isolation) from the OCI archive, in a storage root of its own.

- `shiftlight --version` runs inside it;
- every module of the package imports with only the runtime dependencies the image carries (no dev extras);
- the image config says uid 65532, and the image carries no secrets, wheels or build caches;
- the operator, run inside it against the fake Kubernetes API on the host's loopback, takes the Lease and
  reconciles a TunedService to a first trial, under a uid the image has no passwd entry for (as clusters that
  assign uids run it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import REPO, G, V, free_port, tuned_service, wait_for

pytestmark = [pytest.mark.image, pytest.mark.kube, pytest.mark.slow]

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
ARCHIVE = REPO / "out" / "image" / f"shiftlight-{VERSION}.oci.tar"


@dataclass
class Image:
    """One working container made from the archive, in a private buildah storage root."""

    storage: Path
    container: str
    mountpoint: Path
    config: dict[str, object]

    def buildah(self, *args: str) -> list[str]:
        return [
            "buildah",
            "--root",
            str(self.storage / "root"),
            "--runroot",
            str(self.storage / "run"),
            "--storage-driver",
            "vfs",
            *args,
        ]

    def run_argv(
        self,
        *command: str,
        env: dict[str, str] | None = None,
        volumes: tuple[str, ...] = (),
        user: str = "65532:65532",
    ) -> list[str]:
        argv = self.buildah("run", "--isolation", "chroot", "--user", user)
        for key, value in (env or {}).items():
            argv += ["--env", f"{key}={value}"]
        for volume in volumes:
            argv += ["--volume", volume]
        return [*argv, self.container, "--", *command]

    def run(self, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.run_argv(*command), capture_output=True, text=True, timeout=timeout, check=False)


def build_image() -> None:
    """The archive of the current inputs: `make image` builds it before the suite runs and the script then only links
    the archive cached under the inputs' hash; a plain pytest run, or one after an edit, builds it here."""
    subprocess.run(["bash", str(REPO / "scripts" / "build-image.sh")], check=True, cwd=REPO)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    build_image()
    storage = tmp_path_factory.mktemp("buildah")
    probe = Image(storage, "", Path(), {})
    container = subprocess.run(
        probe.buildah("from", "--quiet", f"oci-archive:{ARCHIVE}"), capture_output=True, text=True, check=True
    ).stdout.strip()
    inspected = json.loads(
        subprocess.run(
            probe.buildah("inspect", "--type", "container", container), capture_output=True, text=True, check=True
        ).stdout
    )
    mountpoint = Path(
        subprocess.run(probe.buildah("mount", container), capture_output=True, text=True, check=True).stdout.strip()
    )
    image = Image(storage, container, mountpoint, inspected["OCIv1"]["config"])
    try:
        yield image
    finally:
        subprocess.run(image.buildah("rm", container), capture_output=True, check=False)
        subprocess.run(image.buildah("rm", "--all"), capture_output=True, check=False)
        shutil.rmtree(storage, ignore_errors=True)


def test_version_runs_inside_the_image(image: Image) -> None:
    result = image.run("shiftlight", "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"shiftlight {VERSION}"


def test_every_module_imports_with_the_runtime_dependencies_alone(image: Image) -> None:
    script = (
        "import importlib, pkgutil, controller\n"
        "bad = []\n"
        "for m in pkgutil.walk_packages(controller.__path__, 'controller.'):\n"
        "    if m.name.endswith('__main__'):\n"
        "        continue\n"
        "    try:\n"
        "        importlib.import_module(m.name)\n"
        "    except Exception as exc:\n"
        "        bad.append(f'{m.name}: {exc!r}')\n"
        "print(len(list(pkgutil.walk_packages(controller.__path__, 'controller.'))))\n"
        "print('\\n'.join(bad))\n"
    )
    result = image.run("python", "-c", script)
    assert result.returncode == 0, result.stderr
    count, *failures = result.stdout.strip().splitlines()
    assert int(count) > 80  # the whole package, not an empty install
    assert [f for f in failures if f] == []
    dev_only = image.run(
        "python", "-c", "import importlib.util as u; print([m for m in ('kmock', 'pytest', 'mypy') if u.find_spec(m)])"
    )
    assert dev_only.stdout.strip() == "[]"


def test_image_runs_as_65532_and_carries_no_secrets_or_caches(image: Image) -> None:
    config = image.config
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["/opt/venv/bin/shiftlight"]
    env = dict(str(e).split("=", 1) for e in config.get("Env", []))  # type: ignore[union-attr]
    assert not [k for k in env if any(word in k.upper() for word in ("TOKEN", "SECRET", "PASSWORD", "KEY"))]
    root = image.mountpoint
    for leftover in ("tmp/wheels", "root/.cache", "src", "build", "wheels"):
        assert not (root / leftover).exists(), leftover
    suspicious: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink() and d not in ("proc", "sys", "dev")]
        for name in filenames:
            path = Path(dirpath) / name
            if Path(dirpath) == root / "usr/share/python-wheels":
                continue  # Debian's python3-venv ships pip and setuptools wheels for ensurepip
            if name.endswith((".whl", ".pem.key")) or name in (".git", "id_rsa", "pip.conf", ".netrc"):
                suspicious.append(str(path.relative_to(root)))
        if Path(dirpath).name in (".git", "__pypackages__", "pip-cache"):
            suspicious.append(str(Path(dirpath).relative_to(root)))
    assert suspicious == []
    private_keys = subprocess.run(
        [
            "grep",
            "-rlI",
            "--exclude-dir=proc",
            "-e",
            "BEGIN RSA PRIVATE KEY",
            "-e",
            "BEGIN PRIVATE KEY",
            str(root / "etc"),
            str(root / "opt"),
            str(root / "root"),
            str(root / "tmp"),
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert [p for p in private_keys if "/site-packages/" not in p] == []  # libraries' test fixtures aside
    size = subprocess.run(["du", "-sm", str(root)], capture_output=True, text=True, check=True).stdout.split()[0]
    print(f"image: {ARCHIVE.name} {ARCHIVE.stat().st_size / 2**20:.0f} MiB archive, {size} MiB unpacked")


def healthz(port: int) -> str:
    try:
        return str(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read().decode())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return ""


def test_the_operator_in_the_image_takes_the_lease_and_reaches_a_first_trial(
    image: Image,
    kube: KubeAPIServer,
    api: client.ApiClient,
    operator_kubeconfig: Path,
    policy_dir: Path,
    tmp_path: Path,
) -> None:
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service(route=None))
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copy(operator_kubeconfig, shared / "kubeconfig")
    shutil.copytree(policy_dir, shared / "policies")
    for path in (shared, *shared.rglob("*")):  # the operator runs as uid 65532
        path.chmod(0o755 if path.is_dir() else 0o644)
    port = free_port()
    env = {
        "KUBECONFIG": "/config/kubeconfig",
        "POD_NAME": "shiftlight-image-0",
        "SHIFTLIGHT_LEASE_NAMESPACE": "shiftlight",
        "SHIFTLIGHT_BACKEND": "simulator",
        "SHIFTLIGHT_POLICY_DIR": "/config/policies",
        "SHIFTLIGHT_HEALTH_PORT": str(port),
        "SHIFTLIGHT_METRICS_PORT": str(free_port()),
        "SHIFTLIGHT_TIME_SCALE": "300",
        "SHIFTLIGHT_LOG_FORMAT": "json",
    }
    # an arbitrary uid without a passwd entry, as clusters that assign uids run it (the image's own is 65532)
    argv = image.run_argv("shiftlight", "operator", env=env, volumes=(f"{shared}:/config:ro",), user="1000670000:0")
    log_path = tmp_path / "operator.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(
                "the Lease",
                lambda: "leader=True" in healthz(port) or (proc.poll() is not None and log_path.read_text() + "EXITED"),
                timeout=120,
                interval=0.25,
            )
            assert proc.poll() is None, log_path.read_text()[-3000:]
            body = wait_for(
                "a first trial in status",
                lambda: (
                    (b := co.get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse"))
                    .get("status", {})
                    .get("trials")
                    and b
                ),
                timeout=120,
                interval=0.25,
            )
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    lease = client.CoordinationV1Api(api).read_namespaced_lease("shiftlight-leader", "shiftlight")
    assert lease.spec.holder_identity in ("shiftlight-image-0", None)  # held, or released on SIGTERM
    assert body["status"]["trials"][0]["status"] in ("measured", "infeasible", "rejected")
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    assert lines, log_path.read_text()[-2000:]  # SHIFTLIGHT_LOG_FORMAT=json reached the logger inside the image
