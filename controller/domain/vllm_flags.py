"""How vLLM's parser reads the flags Shiftlight tunes, for :mod:`controller.domain.invocation`: which token names a
tuned flag (underscores read as dashes, argparse abbreviations, the short aliases ``-tp`` / ``-sc``, ``--no-`` forms),
where each flag is set on a command line, the flags a ``--config`` file stands for, and the knobs they set.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from controller.errors import InvalidInput

#: Tuned flag -> kind. ``bool``: a store-true flag that has a ``--no-`` form; ``value``: takes one value.
TUNED_FLAGS: dict[str, Literal["bool", "value"]] = {
    "--speculative-config": "value",
    "--async-scheduling": "bool",
    "--mamba-ssm-cache-dtype": "value",
    "--enable-mamba-cache-stochastic-rounding": "bool",
    "--mamba-cache-philox-rounds": "value",
    "--mamba-backend": "value",
    "--max-num-seqs": "value",
    "--max-num-batched-tokens": "value",
    "--kv-cache-dtype": "value",
    "--enable-prefix-caching": "bool",
    "--max-cudagraph-capture-size": "value",
    "--gpu-memory-utilization": "value",
    "--tensor-parallel-size": "value",
}

#: Shortest abbreviation vLLM's parser (argparse, ``allow_abbrev=True``) accepts for each tuned flag: the shortest
#: prefix no other option of ``vllm serve`` 0.32 shares. ``--kv-cache-dtype`` has none (another option extends it).
_MIN_ABBREV: dict[str, str] = {
    "--speculative-config": "--specu",
    "--async-scheduling": "--as",
    "--no-async-scheduling": "--no-as",
    "--mamba-ssm-cache-dtype": "--mamba-ssm",
    "--enable-mamba-cache-stochastic-rounding": "--enable-mamba-c",
    "--no-enable-mamba-cache-stochastic-rounding": "--no-enable-mamba-c",
    "--mamba-cache-philox-rounds": "--mamba-cache-p",
    "--mamba-backend": "--mamba-ba",
    "--max-num-seqs": "--max-num-se",
    "--max-num-batched-tokens": "--max-num-b",
    "--enable-prefix-caching": "--enable-pre",
    "--no-enable-prefix-caching": "--no-enable-pre",
    "--max-cudagraph-capture-size": "--max-cu",
    "--gpu-memory-utilization": "--gp",
    "--tensor-parallel-size": "--te",
}

_ALIASES = {"-tp": "--tensor-parallel-size", "-sc": "--speculative-config"}
_SPEC_KEYS = frozenset({"method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"})


def option_key(token: str) -> str:
    """The option name of a token as vLLM reads it: underscores before the first ``.`` become dashes."""
    name = token.split("=", 1)[0]
    head, dot, tail = name.partition(".")
    return head.replace("_", "-") + dot + tail


def tuned_flag(token: str) -> tuple[str, bool] | None:
    """``(canonical tuned flag, negated)`` when ``token`` names a tuned flag, else None."""
    if not token.startswith("-"):
        return None
    name = option_key(token)
    if name in _ALIASES:
        return _ALIASES[name], False
    if not name.startswith("--") or "." in name:
        return None
    for full, shortest in _MIN_ABBREV.items():
        if full.startswith(name) and len(name) >= len(shortest):
            negated = full.startswith("--no-")
            return (("--" + full[5:]) if negated else full), negated
    if name == "--kv-cache-dtype":
        return name, False
    return None


@dataclass(frozen=True)
class FlagUse:
    """Where one tuned flag is set: ``source`` is ``command``, ``args``, ``config`` (the ``--config`` file) or
    ``env``; ``positions`` index the joined argv (the flag's tokens), empty for the config file and env."""

    flag: str
    source: str
    positions: tuple[int, ...]
    value: str | None


def values_after(argv: Sequence[str], i: int) -> list[str]:
    out: list[str] = []
    for tok in argv[i + 1 :]:
        if tok.startswith("-"):
            break
        out.append(tok)
    return out


def option_value(argv: Sequence[str], names: set[str]) -> tuple[int, str] | None:
    """Last ``--name value`` / ``--name=value`` of an option (exact names)."""
    found: tuple[int, str] | None = None
    for i, tok in enumerate(argv):
        key = option_key(tok)
        if key in names:
            if "=" in tok:
                found = (i, tok.split("=", 1)[1])
            elif i + 1 < len(argv):
                found = (i, argv[i + 1])
    return found


def cli_flag_uses(argv: Sequence[str], start: int) -> list[tuple[FlagUse, bool]]:
    uses: list[tuple[FlagUse, bool]] = []
    i = start
    while i < len(argv):
        tok = argv[i]
        hit = tuned_flag(tok)
        if hit is None:
            i += 1
            continue
        flag, negated = hit
        if TUNED_FLAGS[flag] == "bool":
            uses.append((FlagUse(flag, "", (i,), None), negated))
            i += 1
        elif "=" in tok:
            uses.append((FlagUse(flag, "", (i,), tok.split("=", 1)[1]), False))
            i += 1
        else:
            value = argv[i + 1] if i + 1 < len(argv) else None
            uses.append((FlagUse(flag, "", (i, i + 1) if value is not None else (i,), value), False))
            i += 2
    return uses


def config_file_args(text: str, path: str, where: str) -> list[str]:
    """The flags a ``--config`` YAML file stands for, as vLLM's ``load_config_file`` expands them."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"config file is not YAML: {exc}", source=f"{where} {path}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidInput("config file must be a YAML mapping of flag names", source=f"{where} {path}")
    out: list[str] = []
    for key, value in data.items():
        flag = f"--{key}"
        if isinstance(value, bool):
            hit = tuned_flag(flag)
            if value:
                out.append(flag)
            elif hit is not None and TUNED_FLAGS[hit[0]] == "bool":  # vLLM: "--no-KEY" where that option exists
                out.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                out += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def knobs_of(uses: Sequence[tuple[FlagUse, bool]], where: str) -> dict[str, Any]:
    knobs: dict[str, Any] = {}
    for use, negated in uses:  # in order: the last occurrence wins, as in argparse
        flag, value = use.flag, use.value
        field_ = flag
        if TUNED_FLAGS[flag] == "bool":
            name = flag[2:].replace("-", "_")
            name = {"enable_mamba_cache_stochastic_rounding": "mamba_cache_stochastic_rounding"}.get(name, name)
            knobs[name] = not negated
            continue
        if value is None:
            raise InvalidInput(f"{flag} has no value", source=where, field=field_)
        if flag == "--speculative-config":
            try:
                spec = json.loads(value)
            except ValueError:
                raise InvalidInput(f"{flag} is not JSON: {value!r}", source=where, field=field_) from None
            if not isinstance(spec, dict):
                raise InvalidInput(f"{flag} must be a JSON object", source=where, field=field_)
            extra = sorted(set(spec) - _SPEC_KEYS)
            if extra:
                raise InvalidInput(
                    f"{flag} sets {', '.join(extra)}, which Shiftlight does not tune; it would be lost on rewrite",
                    source=where,
                    field=f"{field_}.{extra[0]}",
                )
            for k in ("num_speculative_tokens", "prompt_lookup_max"):
                knobs.pop(k, None)
            knobs["speculative_method"] = spec.get("method", "none")
            if "num_speculative_tokens" in spec:
                knobs["num_speculative_tokens"] = spec["num_speculative_tokens"]
            if "prompt_lookup_max" in spec:
                knobs["prompt_lookup_max"] = spec["prompt_lookup_max"]
                expected = min(int(spec["prompt_lookup_max"]), 2)
                if spec.get("prompt_lookup_min", expected) != expected:
                    raise InvalidInput(
                        f"{flag} prompt_lookup_min must be min(prompt_lookup_max, 2) = {expected}",
                        source=where,
                        field=f"{field_}.prompt_lookup_min",
                    )
            continue
        knobs[flag[2:].replace("-", "_")] = value
    return knobs
