"""The user's vLLM invocation: parse a container's command line (and its ``--config`` file and env) into the knobs
Shiftlight tunes, and rewrite only those knobs.

Pure: no I/O. The ``--config`` file's text is an input (the pod adapter reads it from the ConfigMap mounted at that
path).

Recognised forms (``command`` + ``args`` taken together, as the kubelet joins them):

* ``vllm serve [MODEL] ...`` (``vllm`` may be a path, e.g. ``/opt/venv/bin/vllm``);
* ``python[3] -m vllm.entrypoints.openai.api_server --model M ...`` (and ``-m vllm.entrypoints.cli.main serve``);
* no ``command`` at all: ``args`` go to the image's entrypoint (``vllm serve`` in ``vllm/vllm-openai``).

Flags are matched as vLLM's own parser matches them: underscores read as dashes in the key
(``--max_num_seqs``), ``--flag value`` and ``--flag=value``, argparse abbreviations (``--max-num-seq``), the short
aliases ``-tp`` / ``-sc``, boolean flags and their ``--no-`` forms. A repeated flag: the last one wins (argparse),
and every occurrence is replaced. A command that is a shell string (``sh -c "vllm serve ..."``) cannot be rewritten
and is refused with :class:`~controller.errors.InvalidInput` naming the container and the tuned flag it sets.

The tuned flags are exactly those :meth:`EngineConfig.vllm_args` renders (the single renderer), plus
``OMP_NUM_THREADS`` in the env.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from controller.domain.config import EXPLICIT_DEFAULT_FLAGS, EngineConfig
from controller.errors import InvalidInput

Form = Literal["vllm-serve", "api-server", "entrypoint"]

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

OMP_ENV = "OMP_NUM_THREADS"
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_SPEC_KEYS = frozenset({"method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"})


def _key(token: str) -> str:
    """The option name of a token as vLLM reads it: underscores before the first ``.`` become dashes."""
    name = token.split("=", 1)[0]
    head, dot, tail = name.partition(".")
    return head.replace("_", "-") + dot + tail


def tuned_flag(token: str) -> tuple[str, bool] | None:
    """``(canonical tuned flag, negated)`` when ``token`` names a tuned flag, else None."""
    if not token.startswith("-"):
        return None
    name = _key(token)
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


@dataclass(frozen=True)
class VllmInvocation:
    """A parsed vLLM command line. ``argv`` is ``command + args``; the first ``command_len`` tokens are the
    container's ``command``."""

    form: Form
    argv: tuple[str, ...]
    command_len: int
    has_command: bool
    has_args: bool
    model: str | None
    served_model_name: str | None
    port: int
    config: EngineConfig
    flags: tuple[FlagUse, ...]
    config_file: str | None = None
    config_file_flags: tuple[FlagUse, ...] = ()
    vllm_env: dict[str, str] = field(default_factory=dict)
    where: str = "container"

    def source_of(self, position: int) -> str:
        return "command" if position < self.command_len else "args"


def _values_after(argv: Sequence[str], i: int) -> list[str]:
    out: list[str] = []
    for tok in argv[i + 1 :]:
        if tok.startswith("-"):
            break
        out.append(tok)
    return out


def _option_value(argv: Sequence[str], names: set[str]) -> tuple[int, str] | None:
    """Last ``--name value`` / ``--name=value`` of an option (exact names)."""
    found: tuple[int, str] | None = None
    for i, tok in enumerate(argv):
        key = _key(tok)
        if key in names:
            if "=" in tok:
                found = (i, tok.split("=", 1)[1])
            elif i + 1 < len(argv):
                found = (i, argv[i + 1])
    return found


def _shell_flags(text: str) -> list[str]:
    return sorted({hit[0] for tok in text.split() if (hit := tuned_flag(tok))})


def _form(argv: Sequence[str], has_command: bool, where: str) -> tuple[Form, int]:
    """The invocation form and the index of the first engine argument."""
    if not has_command:
        return "entrypoint", 0
    exe = PurePosixPath(argv[0]).name if argv else ""
    if exe in _SHELLS and "-c" in argv:
        text = " ".join(argv[argv.index("-c") + 1 :])
        flags = _shell_flags(text)
        named = f" and sets {', '.join(flags)} inside it" if flags else ""
        raise InvalidInput(
            f"the vLLM command is a shell string ({exe} -c){named}; Shiftlight cannot rewrite a flag inside a shell "
            "string: give vLLM's command and flags as separate command/args items",
            source=where,
            field=flags[0] if flags else "command",
        )
    if exe == "vllm" and len(argv) > 1 and argv[1] == "serve":
        return "vllm-serve", 2
    if _PYTHON.match(exe):
        i = 1
        while i < len(argv) and argv[i] != "-m" and argv[i].startswith("-"):
            i += 1
        if i + 1 < len(argv) and argv[i] == "-m":
            module = argv[i + 1]
            if module == "vllm.entrypoints.cli.main" and i + 2 < len(argv) and argv[i + 2] == "serve":
                return "vllm-serve", i + 3
            if module.startswith("vllm.entrypoints.") and module.endswith("api_server"):
                return "api-server", i + 2
    raise InvalidInput(
        f"not a vLLM command Shiftlight can rewrite: {' '.join(argv[:3])!r} (expected 'vllm serve', "
        "'python -m vllm.entrypoints.openai.api_server', or args for the image's vllm entrypoint)",
        source=where,
        field="command",
    )


def _cli_flags(argv: Sequence[str], start: int) -> list[tuple[FlagUse, bool]]:
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


def _config_file_args(text: str, path: str, where: str) -> list[str]:
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


def _knobs(uses: Sequence[tuple[FlagUse, bool]], where: str) -> dict[str, Any]:
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


def parse_invocation(
    command: Sequence[str] | None,
    args: Sequence[str] | None,
    env: Mapping[str, str] | None = None,
    *,
    config_files: Mapping[str, str] | None = None,
    where: str = "container",
) -> VllmInvocation:
    """Parse a container's vLLM invocation. ``config_files`` maps a path to the text of the ``--config`` file found
    there; ``where`` names the container in errors."""
    cmd, arg = list(command or []), list(args or [])
    argv = cmd + arg
    form, start = _form(argv, bool(cmd), where)
    config_file: str | None = None
    file_uses: list[tuple[FlagUse, bool]] = []
    file_args: list[str] = []
    for i, tok in enumerate(argv[start:], start):
        if _key(tok) == "--config" and "=" in tok:
            raise InvalidInput(
                "vLLM only reads a config file given as '--config FILE' (two items)", source=where, field="--config"
            )
        if tok == "--config":
            if config_file is not None:
                raise InvalidInput("more than one --config", source=where, field="--config")
            config_file = argv[i + 1] if i + 1 < len(argv) else None
            if config_file is None:
                raise InvalidInput("--config has no file", source=where, field="--config")
    if config_file is not None:
        text = (config_files or {}).get(config_file)
        if text is None:
            raise InvalidInput(
                f"--config {config_file} is not a file from a ConfigMap mounted in the pod; Shiftlight cannot see "
                "which tuned flags it sets",
                source=where,
                field="--config",
            )
        file_args = _config_file_args(text, config_file, where)
        file_uses = [(FlagUse(u.flag, "config", (), u.value), neg) for u, neg in _cli_flags(file_args, 0)]
    cli = [(FlagUse(u.flag, "command" if u.positions[0] < len(cmd) else "args", u.positions, u.value), neg)
           for u, neg in _cli_flags(argv, start)]  # fmt: skip
    env = dict(env or {})
    # vLLM inserts the config file's flags before the command line's: the command line wins
    # (vllm/utils/argparse_utils.py, FlexibleArgumentParser._pull_args_from_config: "maintaining this order will
    # enforce the precedence of cli > config > defaults").
    knobs = _knobs([*file_uses, *cli], where)
    if OMP_ENV in env:
        knobs["omp_num_threads"] = env[OMP_ENV]
    try:
        engine = EngineConfig.model_validate(knobs)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "flags"
        raise InvalidInput(f"the tuned flags do not form a valid engine config: {err['msg']}", source=where,
                           field=loc) from None  # fmt: skip
    # model, served name and port (command line over config file)
    joined = file_args + argv[start:]
    model: str | None = None
    if form in ("vllm-serve", "entrypoint") and start < len(argv) and not argv[start].startswith("-"):
        model = argv[start]
    if model is None and (hit := _option_value(joined, {"--model"})):
        model = hit[1]
    served: str | None = None
    for i, tok in enumerate(joined):
        if _key(tok) == "--served-model-name":
            names = [tok.split("=", 1)[1]] if "=" in tok else _values_after(joined, i)
            served = names[0] if names else served
    port_hit = _option_value(joined, {"--port"})
    try:
        port = int(port_hit[1]) if port_hit else 8000
    except ValueError:
        raise InvalidInput(f"--port is not a number: {port_hit[1]!r}", source=where, field="--port") from None  # type: ignore[index]
    return VllmInvocation(
        form=form,
        argv=tuple(argv),
        command_len=len(cmd),
        has_command=command is not None and bool(cmd),
        has_args=args is not None,
        model=model,
        served_model_name=served,
        port=port,
        config=engine,
        flags=tuple(u for u, _ in cli),
        config_file=config_file,
        config_file_flags=tuple(u for u, _ in file_uses),
        vllm_env={k: v for k, v in env.items() if k.startswith("VLLM_")},
        where=where,
    )


def _flags_of(config: EngineConfig) -> set[str]:
    return {hit[0] for tok in config.vllm_args() if (hit := tuned_flag(tok))}


def render_invocation(
    invocation: VllmInvocation, config: EngineConfig, *, extra: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """``(command, args)`` for ``config``: every tuned flag of ``invocation`` removed, ``config.vllm_args()`` put in
    place of the first one (or at the end), every other token kept in place and order. ``extra`` (e.g.
    ``--served-model-name X``) goes at the end. A tuned knob the ``--config`` file sets is overridden on the command
    line (vLLM gives the command line precedence); one whose vLLM default has no command-line spelling is refused."""
    needed = {u.flag for u in invocation.config_file_flags} - _flags_of(config)
    for flag in sorted(needed - EXPLICIT_DEFAULT_FLAGS):
        raise InvalidInput(
            f"{flag} is set in the config file {invocation.config_file}; this config leaves it at vLLM's default, "
            "which has no command-line spelling to override the file with: move the flag out of the config file",
            source=invocation.where,
            field=flag,
        )
    new_flags = config.vllm_args(explicit_defaults=needed)
    drop = {p for use in invocation.flags for p in use.positions}
    first = min(drop) if drop else None
    tokens: list[tuple[str, str]] = []
    for i, tok in enumerate(invocation.argv):
        if i == first:
            tokens += [(t, invocation.source_of(i)) for t in new_flags]
        if i not in drop:
            tokens.append((tok, invocation.source_of(i)))
    tail_source = "args" if invocation.has_args or not invocation.has_command else "command"
    if first is None:
        tokens += [(t, tail_source) for t in new_flags]
    tokens += [(t, tail_source) for t in extra]
    command = [t for t, s in tokens if s == "command"]
    args = [t for t, s in tokens if s == "args"]
    return command, args


__all__ = ["TUNED_FLAGS", "FlagUse", "VllmInvocation", "parse_invocation", "render_invocation", "tuned_flag"]
