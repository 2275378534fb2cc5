"""On the GPU host: a canary trial (warm-up until steady, then the measured replay) on a server no traffic has
touched yet, then our trial client beside ``vllm bench serve`` on the same, now warm, server.

    PYTHONPATH=/root/site:. python3 scripts/gpu/warmup_gpu.py --port 8101 --config stock --model-dir DIR \
        --out warmup.jsonl --order ours,bench,bench,ours

1. ``trial``: ``TrialRunner.run`` as a canary trial runs it, with the stability rule (``WarmupRule()``, the
   product's default: 2 consecutive intervals that each got faster by at most 5 % in throughput and TPOT, at
   most 6 rounds of one request per stream), on a closed-loop 512/512 plan of 4 x C requests at C streams. The launcher attaches to the
   running server (it was started by ``measure.py``, so its start-up is already paid); every warm-up round's
   figures are recorded, the first of them being what a fresh engine gives.
2. Then, per ``--order``: ``bench`` (``vllm bench serve``) or ``ours`` (``replay_in_worker``, the trial client
   without a warm-up), each on its own seeded plan of the same shape (``loadgen_pair.py``). These are the steady
   figures, and the pair of the two clients.
One JSON line per run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_pair import SERVED, record, run_tool  # noqa: E402

from controller.domain.config import EngineConfig  # noqa: E402
from controller.domain.observation import TargetRef  # noqa: E402
from controller.domain.slo import SLO  # noqa: E402
from controller.domain.traffic import LengthDistribution, TrafficShape  # noqa: E402
from controller.ports import TrialBudget, TrialRequest  # noqa: E402
from controller.trials.engine.launchers import Launch  # noqa: E402
from controller.trials.runner import RunnerSettings, TrialRunner  # noqa: E402
from controller.trials.loadgen.warmup import WarmupRule, WarmupVerdict  # noqa: E402


class AttachedLauncher:
    """A launcher for a server that is already running: start attaches, stop leaves it running."""

    source = "local-process"

    def __init__(self, port: int, startup_s: float) -> None:
        self.endpoint = f"http://127.0.0.1:{port}"
        self.startup_s = startup_s

    def start(self, config: EngineConfig, *, timeout_s: float | None = None) -> Launch:
        return Launch(endpoint=self.endpoint, model=SERVED, ready=True, startup_s=self.startup_s)

    def logs(self, launch: Launch) -> tuple[str, ...]:
        return ()

    def stop(self, launch: Launch) -> None:
        return None


class RecordingRunner(TrialRunner):
    """The trial runner, keeping the warm-up's verdict (every round's figures) for the record."""

    verdict: WarmupVerdict | None = None

    def _warm_until_steady(self, *args: object, **kwargs: object) -> WarmupVerdict:  # type: ignore[override]
        self.verdict = super()._warm_until_steady(*args, **kwargs)  # type: ignore[arg-type]
        return self.verdict


def run_trial(port: int, conc: int, vocab: int, startup_s: float) -> dict[str, object]:
    length = LengthDistribution(mean=512, cv=0.0, maximum=512)
    shape = TrafficShape(arrival_rate_rps=0, concurrency=conc, prompt_tokens=length, output_tokens=length)
    settings = RunnerSettings(
        mode="closed", token_id_range=(3, vocab), max_model_len=4096, warmup_rule=WarmupRule(), invalid_retries=0
    )
    runner = RecordingRunner(
        AttachedLauncher(port, startup_s), model=SERVED, gpu_type="h200", engine_version="0.26.0", settings=settings
    )
    budget = TrialBudget(duration_s=300, warmup_s=200, max_requests=4 * conc, startup_timeout_s=10)
    slo = SLO(ttft_seconds=60, tpot_seconds=1.0)
    target = TargetRef(namespace="gpu", name="engine", model=SERVED)
    request = TrialRequest(target, EngineConfig(), shape, slo, budget, seed=77)
    t0 = time.monotonic()
    result = runner.run(request)
    v = runner.verdict
    return {
        "tool": "trial", "wall_s": time.monotonic() - t0, "status": result.status.value, "reason": result.reason,
        "warmup_rounds": result.warmup_rounds,
        "warmup": [{"output_throughput": r.output_tokens_per_s, "median_tpot_ms": (r.tpot_p50_s or 0) * 1000}
                   for r in (v.history if v else ())],
        "warmup_verdict": v.reason if v else None,
        "completed": result.completed, "output_throughput": result.output_tokens_per_s,
        "median_ttft_ms": result.ttft_s.p50 * 1000 if result.ttft_s else None,
        "median_tpot_ms": result.tpot_s.p50 * 1000 if result.tpot_s else None,
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--order", default="bench,ours")
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--startup-s", type=float, default=0.0)
    ap.add_argument("--budget-s", type=float, default=300)
    args = ap.parse_args()
    t_end = time.monotonic() + args.budget_s
    tmp = Path("/tmp/warmup-gpu")
    tmp.mkdir(exist_ok=True)
    conc = args.concurrency
    with open(args.out, "a") as out:
        for i, tool in enumerate(["trial", *args.order.split(",")]):
            if time.monotonic() > t_end:
                print(f"warmup {args.config}: budget spent before run {i}", flush=True)
                break
            if tool == "trial":
                try:
                    rec = run_trial(args.port, conc, args.vocab, args.startup_s)
                except Exception as exc:
                    rec = {"tool": tool, "error": repr(exc)[:2000]}
            else:
                rec = run_tool(tool, args.port, args.model_dir, conc, 2000 + 10 * conc + i, args.vocab, tmp)
            extra = f" warm-up rounds {rec.get('warmup')}" if tool == "trial" else ""
            record(
                out, rec, f"warmup {args.config} c{conc} run {i}", extra, config=args.config, concurrency=conc, run=i
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
