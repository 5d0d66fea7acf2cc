"""How the benchmark tests run a benchmark script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str, timeout: float) -> None:
    """Run ``bench/<script>`` from the repository root; fail with its output if it fails."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
