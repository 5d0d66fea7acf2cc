"""``bench/serve_speed.py --quick`` end to end: real servers, real wrk, real PostgreSQL.

The quick mode is the harness's own check: every code path (each audit trail, both routes,
a 1000-row batch, 2 workers, the bare peer, MLServer when its venv exists, the in-process
floor, RSS, cold start) runs once, and every run must get 2xx answers only.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from tests.support.bench import run_bench

KEYS = {
    "benchmark",
    "started_utc",
    "mode",
    "bundles",
    "duration_s",
    "machine",
    "floor",
    "runs",
    "servers",
    "skipped",
    "failed_runs",
    "ratios",
}
RUN_KEYS = {"bundle", "server", "workers", "audit", "route", "rows", "connections"}
RUN_KEYS |= {"req_per_s", "rows_per_s", "latency_ms", "errors", "non2xx", "ok", "failures", "cpu"}


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_run_measures_every_path(demo_store: Path, tmp_path: Path) -> None:
    if shutil.which("wrk") is None or shutil.which("h2load") is None:
        pytest.fail("wrk or h2load is missing; `make sysdeps` (run by `make test`) installs them")
    out = tmp_path / "out"
    run_bench(
        "serve_speed.py", "--quick", "--store", str(demo_store), "--out", str(out), timeout=600
    )

    (json_file,) = out.glob("serve_speed-*.json")
    assert json_file.with_suffix(".md").is_file()
    report = json.loads(json_file.read_text())
    assert report.keys() >= KEYS
    assert report["mode"] == "quick" and report["bundles"] == ["demo"]
    assert report["failed_runs"] == []

    runs = report["runs"]
    for r in runs:
        assert r.keys() >= RUN_KEYS
        assert r["ok"] > 0 and r["non2xx"] == 0 and r["failures"] == 0, r
    seen = {(r["server"], r["audit"], r["route"], r["rows"]) for r in runs}
    for path in [
        ("ours", "sqlite", "predict", 1),
        ("ours", "sqlite", "oip", 1),
        ("ours", "sqlite", "predict", 1000),
        ("ours", "sqlite", "columnar", 1000),
        ("ours", "sqlite", "grpc", 1),
        ("ours", "sqlite", "oip_binary", 1000),
        ("ours", "off", "predict", 1),
        ("ours", "sqlite-nochain", "predict", 1),
        ("bare", "-", "predict", 1),
        ("ceiling", "-", "predict", 1),
        ("ceiling", "-", "grpc", 1),
    ]:
        assert path in seen, path
    # The ceiling does no work, so it serves faster than ours on each protocol.
    rate = {(r["server"], r["audit"], r["route"], r["rows"]): r["req_per_s"] for r in runs}
    assert rate["ceiling", "-", "predict", 1] > rate["ours", "sqlite", "predict", 1]
    assert rate["ceiling", "-", "grpc", 1] > rate["ours", "sqlite", "grpc", 1]

    skipped = {s["what"]: s["reason"] for s in report["skipped"]}
    servers = {s["label"]: s for s in report["servers"]}
    # PostgreSQL and MLServer may be absent on a machine; then the reason is recorded.
    assert any(r["server"] == "ours" and r["audit"] == "postgres" for r in runs) or (
        "demo ours 2w postgres" in skipped
    )
    assert any(r["server"] == "mlserver" for r in runs) or "demo mlserver 1w" in skipped
    for label, s in servers.items():
        if label in skipped:
            continue
        assert s["error"] is None, s
        assert 0 < s["cold_start_s"] < 120
        assert s["rss_mb"]["worker"] > 10
        # Every server was stopped: nothing listens on its port any more.
        assert not _port_open(s["port"]), label
    assert len(servers["demo ours 2w postgres"]["rss_mb"]["workers"]) == 2 or (
        "demo ours 2w postgres" in skipped
    )

    floor = report["floor"]["demo"]
    assert floor["1"]["predict_ms"] > 0 and floor["1000"]["predict_ms"] > floor["1"]["predict_ms"]
    assert report["ratios"]["demo"]["http_1000_over_floor"]["value"] > 1
    assert report["ratios"]["demo"]["http_1000_columnar_over_floor"]["value"] > 1
    # The floor after a sleep is its own measurement, timed in pairs with the hot call
    # right after it (both see the same load): a sleep never makes a call run in half the
    # time of the hot one beside it. Its ratio is reported beside the target's.
    assert floor["1000"]["idle_over_hot"] > 0.5 and floor["1000"]["predict_after_idle_ms"] > 0
    assert report["ratios"]["demo"]["http_1000_over_floor_after_idle"]["value"] > 0
