"""Policy files: good presets load, bad files fail with file, line, field and allowed values; constraints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.domain.config import STOCK, EngineConfig
from controller.errors import InvalidInput
from controller.policy import (
    MAX_SPACE_COMBINATIONS,
    FloatRange,
    IntRange,
    Policy,
    PolicyError,
    SearchSpace,
    export_json_schema,
    load_policy,
    parse_policy,
)
from tests.support.paths import REPO

ROOT = REPO
PRESETS = sorted((ROOT / "policies" / "v1").glob("*.yaml"))


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_presets_load_and_enumerate_only_valid_configs(path: Path) -> None:
    policy = load_policy(path)
    configs = list(policy.space.configs(policy.feasibility))
    assert len(configs) >= 100
    assert len({c.key() for c in configs}) == len(configs)
    for cfg in configs:
        assert policy.validate_config(cfg) == [], cfg.label()
    assert policy.rollout.steps[-1] == 100
    assert policy.trial_budget.max_trials >= 1


def test_presets_exist_and_schema_is_current() -> None:
    names = {p.name for p in PRESETS}
    assert {"default.yaml", "hybrid-mtp-workstation.yaml", "dense-8b-h200.yaml"} <= names
    committed = json.loads((ROOT / "policies" / "schema.json").read_text())
    assert committed == json.loads(json.dumps(export_json_schema())), "regenerate: python -m controller.policy schema"


def test_schema_entry_point_prints_the_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "controller.policy", "schema"], capture_output=True, text=True, check=True, cwd=ROOT
    )
    schema = json.loads(out.stdout)
    assert schema["title"].startswith("Shiftlight tuning policy")
    assert "space" in schema["properties"] and "rollout" in schema["properties"]


BAD = [
    # (yaml, line, field, fragments of the message)
    ("space:\n  mamba_backend: [fi]\n", 2, "space.mamba_backend[0]", ["'triton', 'flashinfer' or 'cpu'", "'fi'"]),
    ("approval: sometimes\n", 1, "approval", ["'auto', 'manual' or 'manual-for-lossy'"]),
    ("name: x\nspace:\n  flavour: [1]\n", 3, "space.flavour", ["unknown field 'flavour'", "max_num_seqs"]),
    ("bogus: 1\n", 1, "bogus", ["unknown field 'bogus'", "approval", "rollout"]),
    ("space:\n  max_num_seqs: [64, 0]\n", 2, "space.max_num_seqs[1]", ["greater than or equal to 1"]),
    ("space:\n  max_num_seqs: {min: 512, max: 64}\n", 2, "space.max_num_seqs", ["max (64) must be >= min (512)"]),
    ("rollout:\n  steps: [5, 50, 25]\n", 1, "rollout", ["strictly increase"]),
    ("rollout:\n  steps: [5, 50]\n", 1, "rollout", ["end at 100"]),
    ("slo:\n  tpot_seconds: -1\n", 2, "slo.tpot_seconds", ["greater than 0"]),
    ("llm:\n  timeout_s: fast\n", 2, "llm.timeout_s", ["valid number"]),
    ("space:\n  kv_cache_dtype: [int3]\n", 2, "space.kv_cache_dtype[0]", ["'fp8'", "'auto'"]),
    ("target:\n  gpu_family: volta\n", 2, "target.gpu_family", ["'hopper'", "'blackwell'"]),
    ("quality_gate:\n  lossy:\n    - knob: kv_cache_dtype\n", 3, "quality_gate.lossy[0]", ["exactly one of"]),
    ("version: 2\n", 1, "version", ["1"]),
    ("name: [unclosed\n", 2, "", ["not valid YAML"]),
    ("- a\n- b\n", 1, "", ["must be a YAML mapping"]),
    (
        "target: {hybrid: false}\nspace:\n  mamba_ssm_cache_dtype: [float16]\n",
        2,
        "space",
        ["no config satisfies the constraints"],
    ),
]


@pytest.mark.parametrize(
    ("text", "line", "field", "fragments"), BAD, ids=[b[0].split(":")[0] + str(i) for i, b in enumerate(BAD)]
)
def test_bad_policy_names_file_line_field_and_allowed_values(
    tmp_path: Path, text: str, line: int, field: str, fragments: list[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    err = info.value
    assert isinstance(err, InvalidInput)
    message = str(err)
    assert f"{path}:{line}" in message
    assert err.line == line
    if field:
        assert f": {field}: " in message
        assert err.field == field
    for fragment in fragments:
        assert fragment in message


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"nope\.yaml"):
        load_policy(tmp_path / "nope.yaml")


@pytest.mark.security
@pytest.mark.parametrize(
    ("text", "line"), [("", 1), ("\n\n", 1), ("# only a comment\n", 1), ("null\n", 1), ("~\n", 1), ("# a\nnull\n", 2)]
)
def test_an_empty_policy_is_refused(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError, match="the policy is empty") as info:
        load_policy(path)
    assert info.value.line == line
    assert f"{path}:{line}" in str(info.value)


def test_an_explicit_empty_mapping_is_the_default_policy() -> None:
    assert parse_policy("{}\n") == Policy()
    assert load_policy(PRESETS[0]) == load_policy(PRESETS[0])
    assert load_policy(PRESETS[0]) != Policy()


DUPLICATES = [
    # (yaml, line of the repeat, field, line of the first)
    ("name: a\nname: b\n", 2, "name", 1),
    ("space:\n  max_num_seqs: [64]\n  max_num_seqs: [128]\n", 3, "space.max_num_seqs", 2),
    ("llm:\n  enabled: false\nslo: {}\nllm:\n  enabled: true\n", 4, "llm", 1),
    ("overrides:\n  - when: {gpu: [a], gpu: [b]}\n    space: {}\n", 2, "overrides[0].when.gpu", 2),
    (
        "rollout:\n  thresholds:\n    max_error_rate: 0.5\n    max_error_rate: 0.01\n",
        4,
        "rollout.thresholds.max_error_rate",
        3,
    ),
]


@pytest.mark.security
@pytest.mark.parametrize(("text", "line", "field", "first"), DUPLICATES)
def test_duplicate_keys_are_refused_at_any_depth(tmp_path: Path, text: str, line: int, field: str, first: int) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    err = info.value
    assert (err.line, err.field) == (line, field)
    assert f"{path}:{line}: {field}: duplicate key" in str(err)
    assert f"first given on line {first}" in str(err)


def test_yaml_merge_keys_may_be_overridden() -> None:
    text = "space:\n  max_num_seqs: &seqs [64, 128]\ntarget:\n  <<: {gpus: 2}\n  gpus: 4\n"
    assert parse_policy(text).target.gpus == 4


OUT_OF_BOUNDS = [
    # (yaml, field, fragment): each knob's bounds come from vLLM (see controller.policy.KNOB_BOUNDS)
    ("space:\n  max_num_seqs: {min: 0, max: 64}\n", "space.max_num_seqs", "outside vLLM's bounds (>= 1, <= 65536)"),
    ("space:\n  max_num_seqs: {min: 1, max: 100000, step: 1000}\n", "space.max_num_seqs", "<= 65536"),
    ("space:\n  max_num_seqs: [70000]\n", "space.max_num_seqs[0]", "less than or equal to 65536"),
    ("space:\n  max_num_batched_tokens: {min: 8, max: 16, scale: log2}\n", "space.max_num_batched_tokens", ">= 16"),
    ("space:\n  max_num_batched_tokens: [2097152]\n", "space.max_num_batched_tokens[0]", "1048576"),
    ("space:\n  num_speculative_tokens: {min: 0, max: 4}\n", "space.num_speculative_tokens", ">= 1, <= 32"),
    ("space:\n  num_speculative_tokens: [64]\n", "space.num_speculative_tokens[0]", "less than or equal to 32"),
    ("space:\n  prompt_lookup_max: [0]\n", "space.prompt_lookup_max[0]", "greater than or equal to 1"),
    (
        "space:\n  max_cudagraph_capture_size: {min: 512, max: 131072, scale: log2}\n",
        "space.max_cudagraph_capture_size",
        "<= 65536",
    ),
    ("space:\n  gpu_memory_utilization: [1.2]\n", "space.gpu_memory_utilization[0]", "less than or equal to 1"),
    (
        "space:\n  gpu_memory_utilization: {min: 0.5, max: 0.9, step: 0.00001}\n",
        "space.gpu_memory_utilization.step",
        "0.0001",
    ),
    ("space:\n  tensor_parallel_size: [0]\n", "space.tensor_parallel_size[0]", "greater than or equal to 1"),
    ("space:\n  tensor_parallel_size: [128]\n", "space.tensor_parallel_size[0]", "less than or equal to 64"),
    ("space:\n  max_num_seqs: {min: 64, max: 512, scale: log2, step: 3}\n", "space.max_num_seqs", "takes no step"),
]


@pytest.mark.security
@pytest.mark.parametrize(("text", "field", "fragment"), OUT_OF_BOUNDS)
def test_range_knobs_are_bounded_by_vllm_limits(text: str, field: str, fragment: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="p.yaml")
    assert info.value.field == field
    assert info.value.line == 2
    assert fragment in str(info.value)


HUGE = (
    "name: huge\n"
    "space:\n"
    "  max_num_seqs: {min: 1, max: 65536}\n"
    "  max_num_batched_tokens: {min: 16, max: 1048576, step: 64}\n"
    "  gpu_memory_utilization: {min: 0.01, max: 1.0, step: 0.01}\n"
    "  kv_cache_dtype: [auto, fp8]\n"
    "  enable_prefix_caching: [null, true, false]\n"
    "  speculative_method: [none, ngram, mtp]\n"
)


@pytest.mark.security
def test_a_space_of_a_trillion_combinations_fails_fast_naming_knobs_and_count() -> None:
    size = 65536 * ((1048576 - 16) // 64 + 1) * 100 * 2 * 3 * 3
    assert size > 10**12
    with pytest.raises(PolicyError) as info:
        parse_policy(HUGE, source="huge.yaml")
    err = info.value
    assert (err.line, err.field) == (2, "space")
    message = str(err)
    assert f"{size:,} combinations" in message
    for knob, count in [("max_num_seqs", 65536), ("max_num_batched_tokens", 16384), ("gpu_memory_utilization", 100)]:
        assert f"{knob} ({count:,})" in message
    assert f"limit of {MAX_SPACE_COMBINATIONS:,}" in message


@pytest.mark.security
def test_an_override_cannot_grow_the_space_past_the_cap() -> None:
    text = (
        "target: {gpu_family: hopper}\n"
        "space:\n  max_num_seqs: {min: 1, max: 512}\n"
        "overrides:\n  - when: {gpu_family: [hopper]}\n"
        "    space: {max_num_batched_tokens: {min: 16, max: 65536, step: 16}}\n"
    )
    with pytest.raises(PolicyError, match="combinations"):
        parse_policy(text)


@pytest.mark.security
def test_enumeration_refuses_an_oversized_space_before_building_any_config() -> None:
    # a space built without validation (model_construct) still cannot be enumerated
    huge = SearchSpace.model_construct(
        max_num_seqs=IntRange(min=1, max=65536),
        max_num_batched_tokens=IntRange(min=16, max=1_048_576),
    )
    assert huge.product_size() == 65536 * (1_048_576 - 16 + 1)
    with pytest.raises(InvalidInput) as info:
        huge.raw_configs()
    assert info.value.field == "space"
    with pytest.raises(InvalidInput, match="max_num_seqs"):
        huge.configs()


def test_the_cap_itself_is_allowed() -> None:
    # 5 x 20000 = the cap exactly: counted, never refused
    space = SearchSpace(
        max_num_seqs=[1, 2, 4, 8, 16],
        max_num_batched_tokens=IntRange(min=16, max=16 + 19999 * 16, step=16),
    )
    assert space.product_size() == MAX_SPACE_COMBINATIONS
    assert space.size_problem() is None


RANGE_COUNTS = [
    (IntRange(min=64, max=512, scale="log2"), [64, 128, 256, 512]),
    (IntRange(min=64, max=1000, scale="log2"), [64, 128, 256, 512]),
    (IntRange(min=3, max=3, scale="log2"), [3]),
    (IntRange(min=16, max=64, step=16), [16, 32, 48, 64]),
    (IntRange(min=16, max=70, step=16), [16, 32, 48, 64]),
    (FloatRange(min=0.85, max=0.95, step=0.05), [0.85, 0.9, 0.95]),
    (FloatRange(min=0.5, max=0.5, step=0.1), [0.5]),
]


@pytest.mark.parametrize(("rng", "values"), RANGE_COUNTS)
def test_range_count_matches_its_values(rng: IntRange | FloatRange, values: list[float]) -> None:
    assert rng.values() == values
    assert rng.count() == len(values)


HYBRID = "target: {gpu_family: hopper, hybrid: true, has_mtp: true, gpu_memory_gib: 141}\n"
DENSE = "target: {gpu_family: hopper, hybrid: false, has_mtp: false, gpus: 1}\n"

CONSTRAINTS = [
    # (policy yaml, config, expected reason fragment or None)
    (
        HYBRID,
        EngineConfig(mamba_ssm_cache_dtype="float16", mamba_cache_stochastic_rounding=True),
        "needs mamba_backend flashinfer",
    ),
    (
        HYBRID,
        EngineConfig(mamba_ssm_cache_dtype="float16", mamba_cache_stochastic_rounding=True, mamba_backend="flashinfer"),
        None,
    ),
    (
        HYBRID.replace("hopper", "blackwell"),
        EngineConfig(mamba_ssm_cache_dtype="float16", mamba_cache_stochastic_rounding=True, mamba_backend="triton"),
        None,
    ),
    (
        HYBRID,
        EngineConfig(
            speculative_method="mtp", num_speculative_tokens=2, max_num_seqs=512, max_cudagraph_capture_size=1024
        ),
        "max_cudagraph_capture_size 1024 < max_num_seqs x (1+k) = 1536",
    ),
    (
        HYBRID,
        EngineConfig(
            speculative_method="mtp", num_speculative_tokens=1, max_num_seqs=512, max_cudagraph_capture_size=1024
        ),
        None,
    ),
    # max_num_seqs unset: vLLM's default for a 141 GiB Hopper GPU (1024) is used
    (HYBRID, EngineConfig(max_cudagraph_capture_size=512), "< max_num_seqs x (1+k) = 1024"),
    (
        HYBRID,
        EngineConfig(max_num_seqs=256, max_num_batched_tokens=128),
        "max_num_batched_tokens 128 < max_num_seqs 256",
    ),
    (DENSE, EngineConfig(speculative_method="mtp", num_speculative_tokens=1), "needs a model with an MTP head"),
    (DENSE, EngineConfig(mamba_backend="flashinfer"), "only apply to hybrid models"),
    (DENSE, EngineConfig(tensor_parallel_size=2), "tensor_parallel_size 2 > GPUs available (1)"),
    (DENSE, EngineConfig(speculative_method="ngram", num_speculative_tokens=3, async_scheduling=False), None),
    (
        DENSE + "constraints: {mtp_needs_head: false}\n",
        EngineConfig(speculative_method="mtp", num_speculative_tokens=1),
        None,
    ),
]


@pytest.mark.parametrize(("text", "config", "expected"), CONSTRAINTS)
def test_constraints(text: str, config: EngineConfig, expected: str | None) -> None:
    policy = parse_policy(text)
    reasons = policy.constraint_violations(config)
    if expected is None:
        assert reasons == []
    else:
        assert any(expected in r for r in reasons), reasons


def test_cpu_drafter_never_enumerated_with_async() -> None:
    policy = parse_policy(
        "space:\n  speculative_method: [none, ngram, ngram_gpu]\n  num_speculative_tokens: [2]\n"
        "  async_scheduling: [null, true, false]\n"
    )
    configs = list(policy.space.configs())
    assert not any(c.speculative_method == "ngram" and c.async_scheduling is True for c in configs)
    assert any(c.speculative_method == "ngram_gpu" and c.async_scheduling is True for c in configs)
    # none runs with k=0; a dependent knob never multiplies the space
    assert sum(1 for c in configs if c.speculative_method == "none") == 3


def test_memory_fit_uses_the_feasibility_oracle() -> None:
    policy = parse_policy("space:\n  max_num_seqs: [64, 128, 256]\n")

    def fits(cfg: EngineConfig) -> str | None:
        return "KV cache does not fit" if (cfg.max_num_seqs or 0) > 128 else None

    bound = policy.with_feasibility(fits)
    assert [c.max_num_seqs for c in bound.space.configs()] == [64, 128]
    assert any("KV cache does not fit" in r for r in bound.validate_config(EngineConfig(max_num_seqs=256)))
    assert policy.validate_config(EngineConfig(max_num_seqs=256)) == []


def test_validate_config_out_of_policy_and_active_knobs() -> None:
    policy = parse_policy("space:\n  max_num_seqs: [64, 128]\n")
    assert policy.validate_config(EngineConfig(max_num_seqs=64)) == []
    out = policy.validate_config(EngineConfig(max_num_seqs=96))
    assert out and "not in the policy's allowed values [64, 128]" in out[0]
    odd = EngineConfig(max_num_seqs=64, kv_cache_dtype="fp8")
    assert "is fixed by the policy" in policy.validate_config(odd)[0]
    # a knob the space does not tune may keep the active config's value
    assert policy.validate_config(odd, active=EngineConfig(kv_cache_dtype="fp8")) == []


def test_overrides_apply_per_gpu_family() -> None:
    text = (
        "target: {gpu_family: blackwell, hybrid: true}\n"
        "space:\n  mamba_backend: [triton, flashinfer]\n"
        "overrides:\n  - when: {gpu_family: [hopper]}\n    space: {mamba_backend: [flashinfer]}\n"
    )
    policy = parse_policy(text)
    assert policy.space.allowed("mamba_backend") == ["triton", "flashinfer"]
    hopper = policy.for_target(gpu_family="hopper")
    assert hopper.space.allowed("mamba_backend") == ["flashinfer"]
    assert hopper.for_target(gpu_family="blackwell").space.allowed("mamba_backend") == ["triton", "flashinfer"]


LOSSY = [
    (EngineConfig(), False),
    (EngineConfig(mamba_ssm_cache_dtype="float16"), True),
    (EngineConfig(mamba_ssm_cache_dtype="float32"), False),
    (EngineConfig(kv_cache_dtype="fp8"), True),
    (EngineConfig(speculative_method="mtp", num_speculative_tokens=3), False),
    (EngineConfig(speculative_method="mtp", num_speculative_tokens=7), True),
]


@pytest.mark.parametrize(("config", "lossy"), LOSSY)
def test_lossy_knobs_and_approval(config: EngineConfig, lossy: bool) -> None:
    policy = Policy(approval="manual-for-lossy")
    assert policy.is_lossy(config) is lossy
    assert policy.needs_approval(config) is lossy
    assert Policy(approval="manual").needs_approval(config) is True
    assert Policy(approval="auto").needs_approval(config) is False


def test_ranges_expand() -> None:
    policy = parse_policy(
        "space:\n  max_num_batched_tokens: {min: 2048, max: 16384, scale: log2}\n"
        "  gpu_memory_utilization: {min: 0.85, max: 0.95, step: 0.05}\n"
    )
    assert policy.space.allowed("max_num_batched_tokens") == [2048, 4096, 8192, 16384]
    assert policy.space.allowed("gpu_memory_utilization") == [0.85, 0.9, 0.95]
    assert policy.space.allowed("max_num_seqs") == [STOCK.max_num_seqs]
