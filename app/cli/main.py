"""``iabma``: serve a bundle, move its ``LATEST`` and post outcomes to it; with the
training side, also train, check and benchmark.

The training commands come from the ``iabma.commands`` entry points; where ``training``
is not installed (the serving image) they are listed and refuse with a clear message.
A bad argument or input file is one line on stderr naming it, and exit code 2; anything
unexpected is one line and exit code 1. ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points
from types import TracebackType
from typing import Any, TextIO

from app.cli import (
    audit_archive,
    audit_keygen,
    audit_migrate,
    audit_sums,
    audit_verify,
    feedback,
    rollout,
    serve,
    stage,
)
from app.errors import CommandError, CommandWarning

DESCRIPTION = (
    "Train, check and benchmark IA-BMA bundles, serve them, and move their LATEST. Where "
    "the training side is not installed (the serving image), its commands are listed and "
    "say so. Exit codes: 2 for a bad argument or input, 1 for anything unexpected "
    "(--debug shows the traceback)."
)
# Each entry point of this group names a command and the function that adds its parser.
PLUGINS = "iabma.commands"
FIRST = ("check", "train")  # listed before the serving commands, as a bundle's life runs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iabma", description=DESCRIPTION)
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks and every library warning"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    plugins = sorted(entry_points(group=PLUGINS), key=lambda ep: (ep.name != "train", ep.name))
    for ep in plugins:
        if ep.name in FIRST:
            _add_plugin(sub, ep)
    serve.add_parser(sub)
    rollout.add_parsers(sub)
    stage.add_parsers(sub)
    audit_sums.add_parser(sub)
    audit_verify.add_parser(sub)
    audit_migrate.add_parser(sub)
    audit_archive.add_parser(sub)
    audit_keygen.add_parser(sub)
    feedback.add_parser(sub)
    for ep in plugins:
        if ep.name not in FIRST:
            _add_plugin(sub, ep)
    return parser


def _add_plugin(sub: Any, ep: EntryPoint) -> None:
    try:
        add_parser = ep.load()
    except ModuleNotFoundError as exc:
        side = ep.value.split(".", 1)[0]
        missing = (exc.name or side).split(".", 1)[0]
        what = f"the {side} side ({side}/)" if missing == side else f"the {missing} package"
        p = sub.add_parser(ep.name, help=f"(not installed here: needs {what})")
        p.set_defaults(run=_not_installed(what), takes_any=True)
        return
    add_parser(sub)


def _not_installed(what: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        raise CommandError(
            f"needs {what}, which is not installed here (the serving image has only app/); "
            "run it where iabma[train] is installed from a checkout"
        )

    return run


def _warning_printer(command: str) -> Any:
    """Show our own warnings as ``iabma <command>: warning: ...`` lines."""

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        print(f"iabma {command}: warning: {message}", file=sys.stderr)

    return show


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # A command that is not installed takes any arguments, to say what it needs.
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "takes_any", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    with warnings.catch_warnings():
        if not args.debug:
            # Library chatter (convergence, deprecations) is not the user's problem; ours is.
            warnings.simplefilter("ignore")
            warnings.filterwarnings("always", category=CommandWarning)
            warnings.showwarning = _warning_printer(args.command)
        try:
            code = int(args.run(args) or 0)
            sys.stdout.flush()  # a reader gone shows here, not as noise at exit
            return code
        except CommandError as exc:
            if args.debug:
                traceback.print_exc()
            print(f"iabma {args.command}: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            # The reader went away (``iabma check ... | head``): end quietly, as a Unix tool
            # does, with the code a shell gives a process that SIGPIPE ended.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 141
        except Exception as exc:
            if args.debug:
                raise
            _print_internal(args.command, exc, exc.__traceback__)
            return 1


def _print_internal(command: str, exc: Exception, tb: TracebackType | None) -> None:
    where = traceback.extract_tb(tb)[-1] if tb is not None else None
    at = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
    print(
        f"iabma {command}: error: internal error ({type(exc).__name__}: {exc}){at}; "
        "rerun with --debug for the traceback",
        file=sys.stderr,
    )


if __name__ == "__main__":
    sys.exit(main())
