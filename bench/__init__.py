"""The benchmarks: each module runs as ``python -m bench.<name>`` from the repository root; shared code in
:mod:`bench.common`."""
