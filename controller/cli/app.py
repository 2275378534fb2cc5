"""The commands' error boundary: whatever stops a command ends in one line on stderr and an exit code.

``shiftlight`` and ``shiftctl`` are :class:`App` s. Run as commands, they print, as kubectl does:

- a usage error (an unknown option, a bad value, a missing argument): ``error: <what>; see '<command> --help'``, 2;
- a refused or failed operation (a :class:`~controller.errors.ShiftlightError`: bad settings, a kubeconfig that does
  not load, a missing file, the API server's refusal), a validation error or an OS error: ``error: <why>``, 1;
- anything else (a bug): ``error: unexpected <type>: <message> (run again with --debug for the traceback)``, 1.

``--debug`` anywhere before ``--`` on the command line (or ``SHIFTLIGHT_DEBUG=1``) lets the traceback of any error
but a usage error through instead. Tests that drive the commands with Typer's ``CliRunner`` see the exceptions
themselves.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from pydantic import ValidationError

from controller.domain.text import one_line
from controller.errors import ShiftlightError

DEBUG_FLAG = "--debug"
DEBUG_ENV = "SHIFTLIGHT_DEBUG"

#: Click's exceptions, from wherever Typer takes them (its own copy of Click, or Click).
_click: Any = importlib.import_module(typer.BadParameter.__module__)
UsageError: type[Exception] = _click.UsageError
ClickException: type[Exception] = _click.ClickException
#: The "error" of a command run without arguments that shows its help instead (none in older Click: an empty tuple).
NO_ARGS_IS_HELP: tuple[type[Exception], ...] = tuple(
    c for c in (getattr(_click, "NoArgsIsHelpError", None),) if c is not None
)


def take_debug_flag(argv: Sequence[str]) -> tuple[bool, list[str]]:
    """Whether ``--debug`` is among the options (before a ``--``), and the arguments without it."""
    args = list(argv)
    end = args.index("--") if "--" in args else len(args)
    debug = DEBUG_FLAG in args[:end]
    return debug, [a for i, a in enumerate(args) if i >= end or a != DEBUG_FLAG]


def validation_line(exc: ValidationError) -> str:
    """A pydantic error as one line: ``<model>: <field>: <problem>; ...``."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in exc.errors(include_url=False)
    )
    return f"invalid {exc.title}: {problems}"


def error_line(exc: BaseException) -> tuple[str, int]:
    """The line (without ``error:``) and the exit code an exception that stopped a command ends in."""
    if isinstance(exc, UsageError):
        ctx = getattr(exc, "ctx", None)
        hint = f"; see '{ctx.command_path} --help'" if ctx is not None else ""
        return f"{getattr(exc, 'format_message', exc.__str__)()}{hint}", 2
    if isinstance(exc, ClickException):
        return str(getattr(exc, "format_message", exc.__str__)()), int(getattr(exc, "exit_code", 1))
    if isinstance(exc, typer.Abort):
        return "aborted", 1
    if isinstance(exc, ShiftlightError):
        return str(exc), 1
    if isinstance(exc, ValidationError):
        return validation_line(exc), 1
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}", 1
    return f"unexpected {type(exc).__name__}: {exc} (run again with {DEBUG_FLAG} for the traceback)", 1


def fail(exc: BaseException) -> NoReturn:
    line, code = error_line(exc)
    lines = line.strip().splitlines() or [type(exc).__name__]
    text = one_line(" ".join(part.strip() for part in lines))
    with contextlib.suppress(OSError):  # a reader that went away (``| head``)
        sys.stdout.flush()  # what the command printed comes first
    print(f"error: {text}", file=sys.stderr, flush=True)
    sys.exit(code)


class App(typer.Typer):
    """A Typer app whose command-line runs end in one line on stderr when something stops them (see the module)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        argv = kwargs.pop("args", args[0] if args else None)
        debug, argv = take_debug_flag(sys.argv[1:] if argv is None else argv)
        debug = debug or os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes")
        kwargs["standalone_mode"] = False
        try:
            code = super().__call__(argv, *args[1:], **kwargs)
        except NO_ARGS_IS_HELP as exc:
            exc.show()  # type: ignore[attr-defined]  # the command's help, as with no arguments at all
            sys.exit(getattr(exc, "exit_code", 2))
        except (ClickException, typer.Abort) as exc:
            fail(exc)
        except Exception as exc:
            if debug:
                raise
            fail(exc)
        sys.exit(code if isinstance(code, int) else 0)
