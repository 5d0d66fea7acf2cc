"""``iabma refit`` without ``--quiet`` on a narrow terminal: every progress bar stays on one
line of the terminal's width and is redrawn in place, so no bar lands over another."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.cli.main import main
from app.cli.progress import ProgressBar
from tests.training.refit.conftest import World

COLUMNS = 64
# A bar's redraw: from a carriage return to the next carriage return or newline.
_DRAW = re.compile(r"\r([^\r\n]*)")


def test_a_bar_fits_the_terminal_and_blanks_a_longer_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    bar = ProgressBar(2_000_000, "rows through the experts")
    bar.started -= 1e-3  # a rate shown from the first update: the longest text
    bar.update(1_000_000)
    bar.started = 1e12  # no rate: a shorter text over the longer one
    bar.update(2_000_000)
    bar.close()
    err = capsys.readouterr().err
    draws = _DRAW.findall(err)
    assert len(draws) == 2 and err.count("\n") == 1 and err.endswith("\n")
    assert all(len(d) <= COLUMNS - 1 for d in draws), draws
    assert len(draws[1]) >= len(draws[0]), "the second draw blanks what the first showed"


def test_refit_bars_do_not_wrap_on_a_narrow_terminal(
    world: World, store: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    args = ["refit", "--store", str(store), "--name", "demo", "--audit-url", world.full_url]
    code = main(args)
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "rows through the experts" in err and "gate epochs" in err
    lines = [d for d in _DRAW.findall(err) if d.strip()]
    assert lines and all(len(d) <= COLUMNS - 1 for d in lines), max(lines, key=len)
    assert "\r" not in out, "no bar on stdout, among the report's lines"
