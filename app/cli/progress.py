"""A progress bar for the serving commands' long work: one line on stderr, redrawn in place.

The serving side has no tqdm (it comes with training); this is all a command needs. The
line is cut to the terminal's width: a line that wraps cannot be redrawn in place, and
each redraw would then land below the last (bars over one another).
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

WIDTH = 30


class ProgressBar:
    """``[#####     ] 1,000 of 2,000 records, 4,211/s``; :meth:`close` ends the line."""

    def __init__(self, total: int, unit: str, stream: TextIO | None = None) -> None:
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.perf_counter()
        self.drawn = False
        self.shown = 0  # the characters on the line now, to blank what a shorter text leaves

    def update(self, done: int) -> None:
        share = done / self.total if self.total else 1.0
        seconds = time.perf_counter() - self.started
        rate = f", {done / seconds:,.0f}/s" if seconds > 0 and done else ""
        words = f"{done:,} of {self.total:,} {self.unit}{rate}"
        # The last column stays empty: writing it moves some terminals to the next line.
        room = max(shutil.get_terminal_size().columns - 1, 1)
        width = min(WIDTH, room - len(words) - 3)  # the bar narrows before the words are cut
        text = words[:room] if width < 5 else f"[{'#' * int(width * share):<{width}}] {words}"
        print(f"\r{text:<{self.shown}}", end="", file=self.stream, flush=True)
        self.shown = len(text)
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            print(file=self.stream, flush=True)
            self.drawn = False
            self.shown = 0
