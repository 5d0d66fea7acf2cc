"""Docstrings as ``--help`` text: the same words, without their reStructuredText marks."""

from __future__ import annotations

import argparse
import re
from typing import Any


def help_text(doc: str | None) -> str:
    """``doc`` with its double backticks and ``:role:`` marks removed."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", doc or "")
    return text.replace("``", "")


def command(sub: Any, name: str, summary: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of command ``name``: ``summary`` in the command list, ``doc`` (a module
    docstring) as its ``--help``, line breaks kept."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=help_text(doc),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser
