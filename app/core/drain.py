"""Draining on SIGTERM: ``/readyz`` turns 503 at once, the server keeps serving for
``IABMA_DRAIN_SECONDS``, then uvicorn shuts down gracefully (docs/design.md, "Draining")."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from app.core.runtime import ModelRuntime

log = logging.getLogger("iabma.drain")


def install_drain_hook(runtime: ModelRuntime, delay_seconds: float) -> Callable[[], None]:
    """Chain a SIGTERM handler in front of the current one; return its uninstaller."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    previous: Any = signal.getsignal(signal.SIGTERM)

    def forward(signum: int, frame: FrameType | None) -> None:
        if callable(previous):
            previous(signum, frame)
            return
        # Nobody else handles SIGTERM here: restore its default action and re-raise it.
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if runtime.draining:
            forward(signum, frame)
            return
        runtime.draining = True
        log.info("SIGTERM: draining; /readyz answers 503 for %.1f s before shutdown", delay_seconds)
        if delay_seconds > 0:
            loop.call_soon_threadsafe(loop.call_later, delay_seconds, forward, signum, None)
        else:
            forward(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)

    def uninstall() -> None:
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, previous)

    return uninstall
