"""Docstrings as ``--help`` text: the same words, without their reStructuredText marks."""

from __future__ import annotations

import re


def help_text(doc: str | None) -> str:
    """``doc`` with its double backticks and ``:role:`` marks removed."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", doc or "")
    return text.replace("``", "")
