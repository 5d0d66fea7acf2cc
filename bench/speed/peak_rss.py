"""The peak resident memory of a process tree, per process, sampled in a thread."""

from __future__ import annotations

import threading
from typing import Any

import psutil

GB = 1024**3


class PeakRss:
    """Samples the peak RSS of a process and all its descendants, per process, in a thread."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        self.root = root
        self.interval = interval
        self.peaks: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                root = psutil.Process(self.root)
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                procs = []
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    name = " ".join(p.cmdline()[1:3])[-60:] or p.name()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                if rss > self.peaks.get(p.pid, ("", 0))[1]:
                    self.peaks[p.pid] = (name, rss)
            self._stop.wait(self.interval)

    def summary(self, exclude: int | None = None) -> dict[str, Any]:
        procs = [
            {"pid": pid, "cmd": name, "peak_gb": round(rss / GB, 3)}
            for pid, (name, rss) in self.peaks.items()
            if pid != exclude
        ]
        procs.sort(key=lambda p: -p["peak_gb"])
        return {"max_gb": procs[0]["peak_gb"] if procs else 0.0, "processes": procs}
