"""``iabma``: train a bundle, serve one, or run the quality benchmark.

Sub-commands import their heavy dependencies only when they run, so ``iabma serve``
works in the serving image, which has no torch and no scikit-learn.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from training.errors import IABMAError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iabma", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    from training.commands import bench, serve, train

    train.add_parser(sub)
    serve.add_parser(sub)
    bench.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except IABMAError as exc:
        # A bad argument or input: one clear line, no traceback.
        print(f"iabma {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
