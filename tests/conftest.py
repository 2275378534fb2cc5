"""Suite-wide collection rules for running the suite over several cores (pytest-xdist, ``--dist loadgroup``).

- Every test that needs a real vLLM engine (the ``engine`` or ``vllm`` marker, or the shared ``engine_server``)
  runs on one worker, in the group ``engine``: the shared server starts once, and no two engines (each ~3 GB, each
  wanting every core) run at the same time; the trials pin the engine and the load generator to cores of their own.
- Every fault-injection test (the ``faults`` marker, or a module that runs the scenarios of ``tests.support.faults``)
  runs on one worker, in the group ``faults``: a scenario's outcome is computed once per process and read by several
  tests (the reliability table reads them all), so on one worker each scenario runs once.
- A test that uses a module- or package-scoped fixture (a Prometheus, a simulated week, a built model) runs on the
  worker that runs the rest of its module (or package), so that fixture is made once, as in a serial run.
- Every other test goes to whichever worker is free.

Without xdist the groups are only markers, and nothing changes.

pytest-xdist's own ``--dist loadgroup`` reads the ``xdist_group`` marker by renaming each test's node id, which
pytest 9 no longer lets it do; so ``--dist loadgroup`` is served here by a scheduler of our own: each worker leaves
the group of each test it collected in a folder the controller names, and the controller's scheduler (xdist's
loadgroup scheduler) reads the group from there instead of from the node id. The ``engine`` and ``faults`` groups
are handed out first, since they are the longest, then every unit with a test marked ``slow``, then the rest: the
long units start early and the short ones fill in around them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

ENGINE_GROUP = "engine"
FAULTS_GROUP = "faults"
FIRST_GROUPS = (ENGINE_GROUP, FAULTS_GROUP)
ENGINE_FIXTURES = frozenset({"engine_server"})
SHARED_SCOPES = {"module": 1, "package": 2}


def runs_fault_scenarios(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    return module is not None and any(
        str(getattr(value, "__module__", "")).startswith("tests.support.faults") for value in vars(module).values()
    )


def xdist_group(item: pytest.Item) -> str | None:
    """The group ``item`` must run in, or None where any worker will do."""
    if item.get_closest_marker("engine") or item.get_closest_marker("vllm"):
        return ENGINE_GROUP
    names = getattr(item, "fixturenames", ())
    if ENGINE_FIXTURES.intersection(names):
        return ENGINE_GROUP
    if item.get_closest_marker("faults") or runs_fault_scenarios(item):
        return FAULTS_GROUP
    info = getattr(item, "_fixtureinfo", None)
    group: tuple[int, str] | None = None
    for name in names:
        for definition in info.name2fixturedefs.get(name, ()) if info is not None else ():
            scope = SHARED_SCOPES.get(definition.scope, 0)
            if scope == 1 and (group is None or group[0] < 1):
                group = (1, str(item.path.relative_to(item.config.rootpath)))
            elif scope == 2 and (group is None or group[0] < 2):
                group = (2, definition.baseid or str(item.path.parent.relative_to(item.config.rootpath)))
    return None if group is None else group[1]


GROUPS_DIR = pytest.StashKey[Path]()
GROUPS_DIR_INPUT = "shiftlight_xdist_groups_dir"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[str, str] = {}
    slow: list[str] = []
    for item in items:
        group = xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            groups[item.nodeid] = group
        if group == ENGINE_GROUP and not item.get_closest_marker("engine"):
            item.add_marker(pytest.mark.engine)
        if item.get_closest_marker("slow"):
            slow.append(item.nodeid)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and GROUPS_DIR_INPUT in workerinput:
        out = Path(workerinput[GROUPS_DIR_INPUT]) / f"{workerinput['workerid']}.json"
        partial = out.with_suffix(".partial")
        partial.write_text(json.dumps({"groups": groups, "slow": slow}))
        os.replace(partial, out)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist's controller, as it starts a worker: the folder the worker leaves its tests' groups in."""
    config = node.config
    if config.getvalue("dist") != "loadgroup":
        return
    if GROUPS_DIR not in config.stash:
        config.stash[GROUPS_DIR] = Path(tempfile.mkdtemp(prefix="shiftlight-xdist-groups-"))
    node.workerinput[GROUPS_DIR_INPUT] = str(config.stash[GROUPS_DIR])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class GroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        """xdist's loadgroup scheduling, with the groups the workers wrote down; the engine group first."""

        groups: dict[str, str] | None = None
        slow: frozenset[str] = frozenset()
        first: list[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                self.groups = {}
                directory = config.stash.get(GROUPS_DIR, None)
                for found in sorted(directory.glob("*.json")) if directory is not None else ():
                    written = json.loads(found.read_text())
                    self.groups.update(written["groups"])
                    self.slow = self.slow.union(written["slow"])
            group = self.groups.get(nodeid)
            return f"@{group}" if group is not None else str(super()._split_scope(nodeid))

        def _assign_work_unit(self, node: Any) -> None:
            if self.first is None:  # the long units, longest first
                slow_units = [scope for scope, unit in self.workqueue.items() if self.slow.intersection(unit)]
                self.first = [f"@{group}" for group in FIRST_GROUPS] + slow_units
            while self.first and self.first[0] not in self.workqueue:
                self.first.pop(0)
            if self.first:
                self.workqueue.move_to_end(self.first.pop(0), last=False)
            super()._assign_work_unit(node)

    return GroupScheduling(config, log)


def pytest_sessionfinish(session: pytest.Session) -> None:
    directory = session.config.stash.get(GROUPS_DIR, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
