"""Run wrk with ``rotate.lua`` against one URL and parse the JSON line its ``done()`` prints.

A Python client cannot load these servers (httpx tops out near 250 req/s here), so
the load comes from wrk. It shares the machine's two cores with the server under test; the
figures are therefore "server + load generator on one box", the same for every peer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

LUA = Path(__file__).with_name("rotate.lua")
FRAMES_LUA = Path(__file__).with_name("frames.lua")
MARKER = "WRK_JSON "
# wrk's default is 2 s: a 1000-row request queued behind 7 others can take longer than that
# on a slow server, and a timeout would hide its latency instead of measuring it.
TIMEOUT_S = 30


class WrkError(RuntimeError):
    """wrk is missing, failed, or printed no result line."""


@dataclass(frozen=True)
class WrkResult:
    threads: int
    connections: int
    duration_s: float
    requests: int  # completed responses, any status
    non2xx: int
    errors: dict[str, int]
    latency_ms: dict[str, float]
    bytes_read: int
    first_bad: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> int:
        return self.requests - self.non2xx

    @property
    def failures(self) -> int:
        # "status" counts wrk's own >399 responses, which non2xx already holds.
        socket_errors = sum(v for k, v in self.errors.items() if k != "status")
        return self.non2xx + socket_errors

    @property
    def req_per_s(self) -> float:
        return self.ok / self.duration_s if self.duration_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("extra")
        out.update(ok=self.ok, failures=self.failures, req_per_s=round(self.req_per_s, 1))
        return out


def wrk_binary() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise WrkError("wrk is not installed (make sysdeps, or apt-get install wrk)")
    return path


def threads_for(connections: int) -> int:
    # wrk needs at least one connection per thread; two threads match the two cores.
    return 1 if connections < 2 else 2


def run_wrk(
    url: str, bodies: Path, connections: int, seconds: float, script: Path = LUA
) -> WrkResult:
    """Load ``url`` for ``seconds`` with ``connections`` keep-alive connections; ``script``
    is rotate.lua (JSON bodies, one per line) or frames.lua (binary bodies)."""
    threads = threads_for(connections)
    cmd = [
        wrk_binary(),
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        f"--timeout={TIMEOUT_S}s",
        "-s",
        str(script),
        url,
        "--",
        str(bodies),
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, errors="replace", timeout=seconds + TIMEOUT_S + 30
        )
    except subprocess.TimeoutExpired as exc:
        # subprocess.run kills wrk before raising, so nothing is left behind.
        raise WrkError(f"wrk did not finish: {' '.join(cmd)}") from exc
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)), None)
    if proc.returncode != 0 or line is None:
        raise WrkError(
            f"wrk exited {proc.returncode} without a result line\n"
            f"stdout: {proc.stdout[-1500:]}\nstderr: {proc.stderr[-1500:]}"
        )
    raw = json.loads(line[len(MARKER) :])
    lat = raw["latency_us"]
    return WrkResult(
        threads=threads,
        connections=connections,
        duration_s=raw["duration_us"] / 1e6,
        requests=int(raw["requests"]),
        non2xx=int(raw["non2xx"]),
        errors={k: int(v) for k, v in raw["errors"].items()},
        latency_ms={k: round(float(lat[k]) / 1e3, 3) for k in ("mean", "p50", "p90", "p99", "max")},
        bytes_read=int(raw["bytes"]),
        first_bad=raw["first_bad"],
    )
