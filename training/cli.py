"""``iabma``: train a bundle, check one against a CSV, serve one, or run the benchmarks.

Sub-commands import their heavy dependencies only when they run, so ``iabma serve``
works in the serving image, which has no torch and no scikit-learn.

Errors stop at this boundary: a bad argument or a bad input file is one line on stderr
naming the parameter (or the file and the column) and exit code 2; anything unexpected is
one line and exit code 1. ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from collections.abc import Sequence
from types import TracebackType
from typing import Any, TextIO

from training.errors import DataWarning, IABMAError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iabma", description=__doc__)
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks and every library warning"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    from training.commands import audit, bench, check, rollout, serve, train

    train.add_parser(sub)
    check.add_parser(sub)
    serve.add_parser(sub)
    rollout.add_parsers(sub)
    audit.add_parser(sub)
    bench.add_parser(sub)
    return parser


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
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        if not args.debug:
            # Library chatter (convergence, deprecations) is not the user's problem; ours is.
            warnings.simplefilter("ignore")
            warnings.filterwarnings("always", category=DataWarning)
            warnings.showwarning = _warning_printer(args.command)
        try:
            code = int(args.run(args) or 0)
            sys.stdout.flush()  # a reader gone shows here, not as noise at exit
            return code
        except IABMAError as exc:
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
