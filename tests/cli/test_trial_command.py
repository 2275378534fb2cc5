"""`shiftlight trial`: a real trial against a simulated vLLM replica process, with progress and a result table."""

from __future__ import annotations

import json

from click.testing import Result
from typer.testing import CliRunner

from controller.cli.main import app
from controller.domain.trial import TrialResult
from tests.support.builders import shape

MTP1 = '{"speculative_method": "mtp", "num_speculative_tokens": 1}'


def simulated_trial(model: str, gpu: str, *options: str) -> Result:
    """``shiftlight trial`` of MTP1 on a simulated ``model`` on ``gpu``, with the other ``options``."""
    return CliRunner().invoke(
        app, ["trial", "--simulate-model", model, "--simulate-gpu", gpu, "--config", MTP1, *options]
    )


def test_trial_against_a_simulated_replica_reports_engine_time_numbers() -> None:
    result = simulated_trial(
        "nemotron-3-super-fp8",
        "gb300-dgx-station",
        *("--concurrency", "8", "--requests", "24", "--output-tokens", "64", "--prompt-tokens", "128"),
        *("--duration", "20", "-o", "json"),
    )
    assert result.exit_code == 0, result.output
    payload = result.stdout[result.stdout.index("{") :]
    trial = TrialResult.model_validate(json.loads(payload))
    assert trial.ok and trial.source == "simulator" and trial.config.label() == "mtp1"
    assert trial.completed >= 24 and trial.failed == 0
    assert trial.spec_decode is not None and 0 < trial.spec_decode.acceptance_rate <= 1
    assert trial.ttft_s is not None and trial.e2e_s is not None and trial.ttft_s.p50 <= trial.e2e_s.p50
    assert trial.goodput_tokens_per_s <= trial.output_tokens_per_s * (1 + 1e-9)


def test_infeasible_config_exits_non_zero_with_the_reason() -> None:
    result = simulated_trial("llama-3.1-8b", "h200", "--requests", "4")
    assert result.exit_code == 1
    assert "infeasible" in result.stdout and "MTP" in result.stdout.upper()


def test_bad_arguments_name_the_option() -> None:
    runner = CliRunner()
    bad_config = runner.invoke(app, ["trial", "--simulate-model", "x", "--config", '{"max_num_seqs": 0}'])
    assert bad_config.exit_code == 2 and "--config" in bad_config.output
    neither = runner.invoke(app, ["trial"])
    assert neither.exit_code == 2 and "--vllm-model-dir or --simulate-model" in neither.output


def test_results_from_a_sped_up_engine_are_reported_in_engine_time() -> None:
    from controller.domain import SLO, STOCK, Percentiles, TargetRef, TrialStatus
    from controller.ports import TrialBudget, TrialRequest
    from controller.trials.runner import compressed, in_engine_time

    traffic = shape(0, 4, 10, 10)
    request = TrialRequest(
        TargetRef("a", "b", "m"), STOCK, traffic, SLO(ttft_seconds=1.0, tpot_seconds=0.1), TrialBudget(duration_s=60)
    )
    fast = compressed(request, 10)
    assert fast.slo.ttft_seconds == 0.1 and fast.budget.duration_s == 6
    wall = TrialResult(
        config=STOCK,
        shape=traffic,
        slo=fast.slo,
        status=TrialStatus.MEASURED,
        ttft_s=Percentiles(p50=0.01, p95=0.02, p99=0.03),
        tpot_s=Percentiles(p50=0.001, p95=0.002, p99=0.003),
        output_tokens_per_s=1000,
        goodput_tokens_per_s=900,
        duration_s=6,
    )
    engine = in_engine_time(wall, 10, request)
    assert engine.output_tokens_per_s == 100 and engine.goodput_tokens_per_s == 90
    assert engine.ttft_s is not None and engine.ttft_s.p95 == 0.2 and engine.duration_s == 60
    assert engine.slo == request.slo
