"""Run h2load (nghttp2) as a gRPC load generator and read its summary into a WrkResult.

wrk speaks HTTP/1.1 only. h2load is the same kind of tool for HTTP/2 (C, event loop, one
connection per client), so gRPC and REST are both loaded by a native client sharing the
cores with the server. A gRPC call is an HTTP/2 POST of one length-prefixed message with
``content-type: application/grpc``; h2load sends the same message every time (it takes one
body file). Limits of the tool, kept visible in the report:

- it reports latency min, max and mean, not percentiles: p50/p90/p99 are NaN, mean is set;
- a gRPC error still travels in a 200 response (its status is in the trailers), so h2load
  counts it a success. :func:`run_h2load` takes the number of successful calls from the
  caller (the server's own counter) and counts the rest as failures.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from bench.loadgen.wrk import TIMEOUT_S, WrkError, WrkResult, threads_for

GRPC_HEADERS = ("content-type: application/grpc", "te: trailers")
_FINISHED = re.compile(r"finished in ([\d.]+)(ms|s), ([\d.]+) req/s")
_REQUESTS = re.compile(
    r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
    r"(\d+) errored, (\d+) timeout"
)
_STATUS = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")
_TIME = r"\s+([\d.]+)(us|ms|s)"
_TIMES = re.compile(r"time for request:" + _TIME * 3)  # min, max, mean
_SCALE_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def h2load_binary() -> str:
    path = shutil.which("h2load")
    if path is None:
        raise WrkError("h2load is not installed (make sysdeps, or apt-get install nghttp2-client)")
    return path


def grpc_frame(message: bytes) -> bytes:
    """One gRPC message on the wire: uncompressed flag, 4-byte big-endian length, bytes."""
    return b"\0" + len(message).to_bytes(4, "big") + message


def run_h2load(
    url: str, body: Path, connections: int, seconds: float, succeeded: Callable[[], int]
) -> WrkResult:
    """Load ``url`` with gRPC calls for ``seconds``; ``succeeded()`` is read before and after
    and its growth is the number of calls the server answered with status OK."""
    threads = threads_for(connections)
    cmd = [h2load_binary(), f"-c{connections}", "-m1", f"-t{threads}"]
    cmd += [f"-D{max(1, round(seconds))}", "-d", str(body)]
    for header in GRPC_HEADERS:
        cmd += ["-H", header]
    cmd.append(url)
    before = succeeded()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, errors="replace", timeout=seconds + TIMEOUT_S + 30
        )
    except subprocess.TimeoutExpired as exc:
        raise WrkError(f"h2load did not finish: {' '.join(cmd)}") from exc
    ok_calls = succeeded() - before
    out = proc.stdout
    finished, reqs, status, times = (p.search(out) for p in (_FINISHED, _REQUESTS, _STATUS, _TIMES))
    if proc.returncode != 0 or not (finished and reqs and status and times):
        raise WrkError(
            f"h2load exited {proc.returncode} without a summary\n"
            f"stdout: {out[-1500:]}\nstderr: {proc.stderr[-1500:]}"
        )
    duration = float(finished[1]) * (1e-3 if finished[2] == "ms" else 1.0)
    done, errored, timeout = (int(reqs[i]) for i in (3, 6, 7))
    http_ok = int(status[1])
    # Calls still in flight when h2load stops may be answered (and counted) after it.
    grpc_failed = max(0, http_ok - ok_calls)
    mean = float(times[5]) * _SCALE_MS[times[6]]
    nan = math.nan
    return WrkResult(
        threads=threads,
        connections=connections,
        duration_s=duration,
        requests=done,
        non2xx=(done - http_ok) + grpc_failed,
        errors={"errored": errored, "timeout": timeout, "status": 0},
        latency_ms={
            "mean": round(mean, 3),
            "p50": nan,
            "p90": nan,
            "p99": nan,
            "max": round(float(times[3]) * _SCALE_MS[times[4]], 3),
        },
        bytes_read=0,
        first_bad=f"{grpc_failed} calls without grpc-status OK" if grpc_failed else "",
    )
