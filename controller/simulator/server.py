"""``python -m controller.simulator.server``: one simulated vLLM replica behind vLLM's HTTP API
(:class:`~controller.simulator.replica_server.SimulatedServer`), on a model and GPU profile and an engine config.

CLI::

    python -m controller.simulator.server --model hybrid-moe-mtp --gpu gb300-dgx-station \\
        --config '{"speculative_method": "mtp", "num_speculative_tokens": 1}' --port 8000 --speedup 10
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from aiohttp import web
from pydantic import ValidationError

from controller.domain.config import EngineConfig
from controller.errors import ShiftlightError
from controller.simulator.engine import DEFAULT_MAX_MODEL_LEN, ReplicaEngine
from controller.simulator.protocol import validation_message
from controller.simulator.replica_server import SimulatedServer


def build_server(
    *,
    model: str,
    gpu: str,
    config: EngineConfig,
    speedup: float = 1.0,
    seed: int = 0,
    served_model_name: str | None = None,
    max_model_len: int | None = None,
    repetitiveness: float = 0.0,
) -> SimulatedServer:
    """A server for ``model`` on ``gpu`` running ``config``; raises :class:`ValueError` if the config cannot start."""
    from controller.simulator.perf import PerformanceModel
    from controller.simulator.profiles import load_gpu, load_model

    model_profile = load_model(model)
    perf = PerformanceModel(model_profile, load_gpu(gpu))
    reason = perf.feasibility(config)
    if reason is not None:
        raise ValueError(reason)
    limit = max_model_len if max_model_len is not None else DEFAULT_MAX_MODEL_LEN
    # Streams are fed step by step, so per-token timestamps are not kept (a long-running server would accumulate them).
    engine = ReplicaEngine(
        perf, config, seed=seed, max_model_len=limit, repetitiveness=repetitiveness, record_token_times=False
    )
    return SimulatedServer(
        engine, served_model_name=served_model_name or model, speedup=speedup, vocab_size=model_profile.vocab_size
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m controller.simulator.server", description="A simulated vLLM replica behind vLLM's HTTP API."
    )
    parser.add_argument("--model", required=True, help="model profile name")
    parser.add_argument("--gpu", required=True, help="GPU profile name")
    parser.add_argument("--config", default="{}", help="EngineConfig as JSON (default: stock)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--speedup", type=float, default=1.0, help="engine seconds per wall-clock second")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--repetitiveness", type=float, default=0.0, help="share of output copying the context")
    args = parser.parse_args(argv)
    try:
        config = EngineConfig.model_validate_json(args.config)
    except ValidationError as exc:
        message, _ = validation_message(exc)
        print(f"--config: {message}", file=sys.stderr)
        return 2
    if args.speedup <= 0:
        print("--speedup: must be positive", file=sys.stderr)
        return 2
    try:
        server = build_server(
            model=args.model,
            gpu=args.gpu,
            config=config,
            speedup=args.speedup,
            seed=args.seed,
            served_model_name=args.served_model_name,
            max_model_len=args.max_model_len,
            repetitiveness=args.repetitiveness,
        )
    except (ShiftlightError, ValueError, LookupError) as exc:
        print(f"error: engine failed to start: {exc}", file=sys.stderr)
        return 1
    web.run_app(
        server.app(), host=args.host, port=args.port, print=None, handle_signals=True, handler_cancellation=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
