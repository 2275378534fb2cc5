"""The engine command lines the launchers build: the config's flags rendered once, by ``EngineConfig.vllm_args``."""

from __future__ import annotations

import pytest

from controller.adapters.kube.canary.manifest import KubernetesTrialManifest, OwnerRef
from controller.domain.config import EngineConfig
from controller.domain.invocation import parse_invocation
from controller.trials.engine.launchers import CPU_TEST_ARGS, LocalProcessLauncher

CONFIGS = [
    EngineConfig(),
    EngineConfig(max_num_seqs=4, enable_prefix_caching=False),
    EngineConfig(speculative_method="ngram", num_speculative_tokens=3, prompt_lookup_max=4, max_num_batched_tokens=256),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label())
def test_local_command_carries_the_rendered_flags_once(config: EngineConfig) -> None:
    launcher = LocalProcessLauncher("/models/tiny", served_model_name="tiny", engine_python="/venv/bin/python3",
                                    extra_args=CPU_TEST_ARGS)  # fmt: skip
    cmd = launcher.command(config, 34567)
    assert cmd[:3] == ["/venv/bin/python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[3:11] == ["--model", "/models/tiny", "--served-model-name", "tiny", "--host", "127.0.0.1",
                         "--port", "34567"]  # fmt: skip
    assert cmd[11 : 11 + len(CPU_TEST_ARGS)] == list(CPU_TEST_ARGS)
    assert cmd[11 + len(CPU_TEST_ARGS) :] == config.vllm_args()
    assert parse_invocation(cmd, None).config == config


def test_a_tuned_flag_in_extra_args_is_replaced_not_repeated() -> None:
    launcher = LocalProcessLauncher(
        "/m", engine_python="/venv/bin/python3", extra_args=("--max-num-seqs", "8", "--dtype", "float32")
    )
    cmd = launcher.command(EngineConfig(max_num_seqs=64), 1)
    assert cmd.count("--max-num-seqs") == 1
    assert cmd[cmd.index("--max-num-seqs") + 1] == "64"
    assert cmd[-2:] == ["--dtype", "float32"]  # the other flags keep their place


def test_bare_trial_pod_args_parse_back() -> None:
    manifest = KubernetesTrialManifest(
        namespace="ml", target_name="chat", model="/models/chat", served_model_name="chat",
        owner=OwnerRef(api_version="shiftlight.dev/v1alpha1", kind="TunedService", name="chat", uid="u"),
        extra_args=("--max-num-seqs", "8"),
    )  # fmt: skip
    config = EngineConfig(max_num_seqs=32, async_scheduling=True)
    pod = manifest.pod(config, "t1")
    container = pod["spec"]["containers"][0]
    inv = parse_invocation(container["command"], container["args"])
    assert (inv.config, inv.model, inv.served_model_name, inv.port) == (config, "/models/chat", "chat", 8000)
    assert container["args"].count("--max-num-seqs") == 1
