"""What the operator's optimizers hold together is bounded per operator, whatever its tenants do.

Each TunedService's optimizer and memory-fit oracle ask the simulator's performance model about every config of
their pool; the model keeps a plan per config asked. One model per (model, GPU) pair is shared by the whole
process and its plan cache is bounded, so forty TunedServices on legal policies at the combination limit fit the
chart's memory limit. Before, each optimizer built its own model with an unbounded plan cache (about 14 MiB each on
such a policy; forty of them took a process past 512 MiB).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.advisor.priors import simulator_prior
from controller.domain.config import EngineConfig
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.policy import parse_policy, profile_feasibility
from controller.policy.space import MAX_SPACE_COMBINATIONS
from controller.simulator import perf

pytestmark = [pytest.mark.security, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TENANTS = 40
LIMIT_BYTES = 512 << 20  # the chart's resources.limits.memory


def wide_policy_text() -> str:
    """The hybrid-MTP preset with batching as fine ranges: 98,304 raw combinations, under the limit."""
    policy: dict[str, Any] = yaml.safe_load((REPO / "policies/v1/hybrid-mtp-workstation.yaml").read_text())
    policy["space"].pop("max_cudagraph_capture_size")
    policy["space"]["max_num_seqs"] = {"min": 8, "max": 512, "step": 8}
    policy["space"]["max_num_batched_tokens"] = {"min": 1024, "max": 16384, "step": 1024}
    policy["llm"] = {"enabled": False}
    return yaml.safe_dump(policy)


#: Runs in a fresh interpreter: builds one optimizer per TunedService on the wide policy, the way the operator does
#: (policy parsed, memory-fit oracle attached, advisors from the factory), asks each for two proposals, keeps them
#: all alive, and reports its peak resident memory and the shared model's plan count.
_TENANTS_SCRIPT = """
import json, resource, sys
from controller.advisor.factory import advisors_for
from controller.domain.config import STOCK
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext
from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.policy import parse_policy, profile_feasibility
from controller.simulator.perf import PerformanceModel

text, tenants = sys.stdin.read(), int(sys.argv[1])
shape = TrafficShape(arrival_rate_rps=2, concurrency=8, prompt_tokens=LengthDistribution(mean=2000),
                     output_tokens=LengthDistribution(mean=300))
kept, proposed = [], 0
for i in range(tenants):
    policy = parse_policy(text, source=f"tenant-{i}")
    policy = policy.with_feasibility(profile_feasibility(policy))
    advisor = advisors_for(policy, seed=i).advisor
    context = AdvisorContext(TargetRef("prod", f"tenant-{i}", "m"), shape, SLO(), STOCK, (), max_proposals=2)
    proposed += len(advisor.propose(context))
    kept.append((policy, advisor))
model = PerformanceModel.shared(policy.target.model, policy.target.gpu)
peak_kib = 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        peak_kib = int(line.split()[1])
print(json.dumps({"peak_bytes": peak_kib * 1024, "plans": len(model.cached_plans()), "proposed": proposed}))
"""


def test_forty_tunedservices_on_legal_policies_at_the_limit_fit_the_charts_memory_limit() -> None:
    text = wide_policy_text()
    size = parse_policy(text, source="wide").space.product_size()
    assert 0.95 * MAX_SPACE_COMBINATIONS < size <= MAX_SPACE_COMBINATIONS  # legal, and at the limit
    done = subprocess.run(
        [sys.executable, "-c", _TENANTS_SCRIPT, str(TENANTS)],
        input=text,
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\npeak RSS with {TENANTS} optimizers at {size:,} combinations: {report['peak_bytes'] / 2**20:.0f} MiB")
    assert report["proposed"] == 2 * TENANTS
    assert 0 < report["plans"] <= perf.MAX_CACHED_PLANS
    assert report["peak_bytes"] <= LIMIT_BYTES


def test_optimizers_and_oracles_share_one_model_per_model_and_gpu() -> None:
    policy = parse_policy(wide_policy_text(), source="wide")
    model, gpu = policy.target.model, policy.target.gpu
    assert model is not None and gpu is not None
    shared = perf.PerformanceModel.shared(model, gpu)
    assert perf.PerformanceModel.shared(model, gpu) is shared
    # the memory-fit oracle of every policy on this pair is the shared model's
    oracle = profile_feasibility(policy)
    assert oracle is not None and getattr(oracle, "__self__", None) is shared
    # and the optimizer's prior asks it too: one plan per config asked, no second model
    fresh = EngineConfig(max_num_seqs=1000, max_num_batched_tokens=33_000)
    shape = TrafficShape(
        arrival_rate_rps=1,
        concurrency=4,
        prompt_tokens=LengthDistribution(mean=500),
        output_tokens=LengthDistribution(mean=100),
    )
    simulator_prior(model, gpu)(fresh, shape)
    assert fresh in shared.cached_plans()


def test_the_plan_cache_keeps_at_most_its_bound_least_recently_used_first_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(perf, "MAX_CACHED_PLANS", 3)
    model = perf.PerformanceModel.named("nemotron-3-super-nvfp4", "gb300-dgx-station")
    configs = [EngineConfig(max_num_seqs=s) for s in (8, 16, 32, 64)]
    first = model.capacity(configs[0])

    def ask(config: EngineConfig) -> None:
        model.step(config, decode_seqs=4, prefill_tokens=0, mean_context_tokens=500.0)

    for config in configs[:3]:
        ask(config)
    ask(configs[0])  # the first is used again: the second is now the oldest
    ask(configs[3])
    assert model.cached_plans() == [configs[2], configs[0], configs[3]]  # the second went, oldest first
    # a dropped plan is rebuilt the same
    ask(configs[1])
    assert model.capacity(configs[0]) == first
