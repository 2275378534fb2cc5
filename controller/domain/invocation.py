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
``OMP_NUM_THREADS`` in the env; how vLLM's parser reads them is :mod:`controller.domain.vllm_flags`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from pydantic import ValidationError

from controller.domain.config import EXPLICIT_DEFAULT_FLAGS, EngineConfig
from controller.domain.vllm_flags import (
    FlagUse,
    cli_flag_uses,
    config_file_args,
    knobs_of,
    option_key,
    option_value,
    tuned_flag,
    values_after,
)
from controller.errors import InvalidInput

Form = Literal["vllm-serve", "api-server", "entrypoint"]

OMP_ENV = "OMP_NUM_THREADS"
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


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
        if option_key(tok) == "--config" and "=" in tok:
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
        file_args = config_file_args(text, config_file, where)
        file_uses = [(FlagUse(u.flag, "config", (), u.value), neg) for u, neg in cli_flag_uses(file_args, 0)]
    cli = [(FlagUse(u.flag, "command" if u.positions[0] < len(cmd) else "args", u.positions, u.value), neg)
           for u, neg in cli_flag_uses(argv, start)]  # fmt: skip
    env = dict(env or {})
    # vLLM inserts the config file's flags before the command line's: the command line wins
    # (vllm/utils/argparse_utils.py, FlexibleArgumentParser._pull_args_from_config: "maintaining this order will
    # enforce the precedence of cli > config > defaults").
    knobs = knobs_of([*file_uses, *cli], where)
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
    if model is None and (hit := option_value(joined, {"--model"})):
        model = hit[1]
    served: str | None = None
    for i, tok in enumerate(joined):
        if option_key(tok) == "--served-model-name":
            names = [tok.split("=", 1)[1]] if "=" in tok else values_after(joined, i)
            served = names[0] if names else served
    port_hit = option_value(joined, {"--port"})
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


__all__ = ["OMP_ENV", "VllmInvocation", "parse_invocation", "render_invocation"]
