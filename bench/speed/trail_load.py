"""``/predict``'s tail while the trail is archived and pruned (issue 30: its p99 under load
stays within 10% of its p99 on an idle trail).

Our server on a seeded trail, 127.0.0.1 only, is loaded by wrk for ``seconds`` twice: once
with the trail idle, once while another process archives the older half of it and prunes
the rest (``bench/audit_size.py --move-out URL``). Each load stops by itself; the mover is
waited for, then stopped if it outlives its bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.loadgen.wrk import run_wrk
from bench.speed.bundles import prepare_bundle
from bench.speed.trail import serve

REPO = Path(__file__).resolve().parents[2]
MOVER_TIMEOUT_S = 600


def _load(base: str, body: Path, connections: int, seconds: float) -> dict[str, Any]:
    res = run_wrk(base + "/predict", body, connections, seconds)
    return {"req_per_s": round(res.req_per_s, 1), "failures": res.failures, **res.latency_ms}


def p99_while_moving(
    store: Path,
    url: str,
    work: Path,
    seconds: float,
    connections: int,
    warmup: float,
    nice: int = 0,
    mover: Sequence[str] = (),
) -> dict[str, Any]:
    """p99 of single-row ``/predict`` idle and while the trail at ``url`` is moved out by
    a process of niceness ``nice`` (``mover``: another command in its place, whose last
    line of output, if any, is JSON)."""
    ctx, _ = prepare_bundle(store, "demo", work)
    body = ctx.bodies["native", 1]
    with serve(store, "demo", url, work) as base:
        if warmup > 0:
            run_wrk(base + "/predict", body, connections, warmup)
        idle = _load(base, body, connections, seconds)
        argv = ["nice", "-n", str(nice)]
        argv += mover or [sys.executable, str(REPO / "bench" / "audit_size.py"), "--move-out", url]
        t0 = time.perf_counter()
        process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
        try:
            during = _load(base, body, connections, seconds)
            out, _ = process.communicate(timeout=MOVER_TIMEOUT_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        moved_s = time.perf_counter() - t0
    if process.returncode != 0:
        raise RuntimeError(f"{argv[3:]} exited {process.returncode}")
    lines = out.strip().splitlines()
    moved = json.loads(lines[-1]) if lines else {}
    return {
        "seconds": seconds,
        "connections": connections,
        "mover_nice": nice,
        "idle": idle,
        "during": during,
        "p99_ratio": during["p99"] / idle["p99"] if idle["p99"] else float("nan"),
        "move_out": {**moved, "wall_s": moved_s},
    }
