"""One real simulation benchmark shared by the bench tests, and the CLI as a user runs it."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench_harness import run_cli


@dataclass(frozen=True)
class BenchRun:
    out: Path
    proc: subprocess.CompletedProcess[str]
    results: dict[str, Any]
    details: dict[str, Any]


@pytest.fixture(scope="session")
def bench_cache(tmp_path_factory) -> Path:
    """Fitted repetitions, shared so each one's experts train once per session."""
    return tmp_path_factory.mktemp("bench_cache")


@pytest.fixture(scope="session")
def simulation_run(tmp_path_factory, bench_cache) -> BenchRun:
    out = tmp_path_factory.mktemp("sim_out")
    proc = run_cli(
        "quality", "--dataset", "simulation", "--reps", "2", "--out", str(out),
        "--cache-dir", str(bench_cache),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return BenchRun(
        out,
        proc,
        json.loads((out / "results.json").read_text()),
        json.loads((out / "details.json").read_text()),
    )
