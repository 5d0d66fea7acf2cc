"""The CLI as a user runs it, for the bench tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``iabma bench ...`` in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "training.cli", "bench", *args],
        cwd=Path.cwd(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
