"""Every command's --help reads as plain text, not as reStructuredText."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.cli.text import help_text


def test_marks_go_and_words_stay() -> None:
    doc = "``iabma x``: see :func:`~app.core.service.predict` and :mod:`app.audit`."
    assert help_text(doc) == "iabma x: see app.core.service.predict and app.audit."
    assert help_text(None) == ""


@pytest.mark.parametrize("command", ["", "promote", "rollback", "audit-sums", "serve", "check"])
def test_no_help_shows_markup(command: str) -> None:
    args = [sys.executable, "-m", "app.cli.main", *([command] if command else []), "--help"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "``" not in out and ":func:" not in out and ":mod:" not in out
