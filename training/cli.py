"""``python -m training.cli``: the same ``iabma`` command line, from the training side.

The training commands (train, check, bench) reach ``iabma`` through the
``iabma.commands`` entry points; the command line itself is :mod:`app.cli.main`.
"""

from __future__ import annotations

import sys

from app.cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
