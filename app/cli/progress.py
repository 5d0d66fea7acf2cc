"""A progress bar for the serving commands' long work: one line on stderr, redrawn in place.

The serving side has no tqdm (it comes with training); this is all a command needs.
"""

from __future__ import annotations

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

    def update(self, done: int) -> None:
        share = done / self.total if self.total else 1.0
        bar = "#" * int(WIDTH * share)
        seconds = time.perf_counter() - self.started
        rate = f", {done / seconds:,.0f}/s" if seconds > 0 and done else ""
        text = f"\r[{bar:<{WIDTH}}] {done:,} of {self.total:,} {self.unit}{rate}"
        print(text, end="", file=self.stream, flush=True)
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            print(file=self.stream, flush=True)
            self.drawn = False
