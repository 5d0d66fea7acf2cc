"""Serving speed: our server against a bare FastAPI peer and MLServer, in one run.

Every server runs on 127.0.0.1 as a subprocess in its own process group and is loaded by
wrk (``bench/loadgen/rotate.lua``) with real rows of the bundle's dataset, rotating through
256 single-row bodies or 32 bodies of 1000 rows. wrk and the server share the machine's
cores. The run matrix is in ``bench/speed/plan.py``; results go to
``<out>/serve_speed-<UTC>.json`` and ``.md``, and the table to the terminal.

    .venv/bin/python bench/serve_speed.py                # default matrix, ~15 min
    .venv/bin/python bench/serve_speed.py --quick        # every code path, ~1 min
    .venv/bin/python bench/serve_speed.py --full --bundles california
    .venv/bin/python bench/serve_speed.py --oip --bundles demo   # the OIP targets, ~2 min
    .venv/bin/python bench/serve_speed.py --ratio --bundles demo --rounds 5   # ours/bare, ~5 min
    .venv/bin/python bench/serve_speed.py --ratio --chain-cost --bundles demo   # + chain cost
    .venv/bin/python bench/serve_speed.py --scaling --bundles demo   # 2 workers vs 1, PostgreSQL
    .venv/bin/python bench/serve_speed.py --rows1000 --bundles demo --rounds 3   # ~2 min
    .venv/bin/python bench/serve_speed.py --grpc --bundles demo --rounds 3   # gRPC vs REST, ~2 min

gRPC is loaded by h2load (``bench/loadgen/h2load.py``), binary OIP bodies by wrk with
``frames.lua``.

Bundles missing from ``--store`` are trained first (demo ~10 s, california ~60 s).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.loadgen.cpu import CpuWatch, wait_quiet  # noqa: E402
from bench.loadgen.h2load import h2load_binary, run_h2load  # noqa: E402
from bench.loadgen.wrk import FRAMES_LUA, WrkError, WrkResult, run_wrk, wrk_binary  # noqa: E402
from bench.peers import procs  # noqa: E402
from bench.peers.mlserver import MlserverUnavailable  # noqa: E402
from bench.peers.postgres import PostgresUnavailable  # noqa: E402
from bench.speed.bundles import BundleCtx, prepare_bundle  # noqa: E402
from bench.speed.floor import in_process_floor  # noqa: E402
from bench.speed.options import QUIET_PCT, parse_args  # noqa: E402
from bench.speed.plan import Group, Run, build_plan, estimate_seconds  # noqa: E402
from bench.speed.report import compute_ratios, markdown, write_results  # noqa: E402
from bench.speed.servers import Launched, grpc_calls_ok, launch, preflight, rss  # noqa: E402


def measure(srv: Launched, run: Run, b: BundleCtx, args: argparse.Namespace) -> dict:
    path, fmt = srv.paths[run.route], srv.formats[run.route]
    body_file = b.bodies[fmt, run.rows]
    port = srv.grpc_port if fmt == "grpc" and srv.grpc_port else srv.port
    preflight(port, path, body_file, fmt)
    url = f"http://127.0.0.1:{port}{path}"
    load = load_for(srv, fmt, run.rows)
    server_pids = [srv.pid, *procs.descendants(srv.pid)]
    # Other work on this 2-core machine (test suites, training) takes throughput from the
    # server: wait for a quiet moment, within limits, and record what was seen.
    quiet = wait_quiet(server_pids, QUIET_PCT, args.quiet_wait)
    if args.warmup > 0:
        load(url, body_file, run.connections, args.warmup)
    watch = CpuWatch(server_pids)
    watch.start()
    res = load(url, body_file, run.connections, args.duration)
    cpu = watch.stop()
    s = run.server
    return {
        "bundle": s.bundle,
        "server": s.kind,
        "workers": s.workers,
        "audit": s.audit,
        "route": run.route,
        "path": path,
        "rows": run.rows,
        **res.as_dict(),
        "rows_per_s": round(res.req_per_s * run.rows, 1),
        "cpu": {**cpu, **quiet},
        "cpus": os.cpu_count(),
    }


def load_for(srv: Launched, fmt: str, rows: int) -> Callable[..., WrkResult]:
    """wrk for HTTP/1.1 (JSON lines, or binary frames); h2load for gRPC."""
    if fmt == "binary":
        return functools.partial(run_wrk, script=FRAMES_LUA)
    if fmt != "grpc":
        return run_wrk

    def grpc_load(url: str, body: Path, connections: int, seconds: float) -> WrkResult:
        return run_h2load(url, body, connections, seconds, lambda: grpc_calls_ok(srv) // rows)

    return grpc_load


def progress(i: int, total: int, t0: float, run: Run, r: dict[str, Any] | str) -> None:
    clock = time.strftime("%M:%S", time.gmtime(time.monotonic() - t0))
    if isinstance(r, str):
        text = f"FAILED: {r.splitlines()[0][:160]}"
    else:
        lat = r["latency_ms"]
        text = (
            f"{r['req_per_s']:>9,.0f} req/s {r['rows_per_s']:>10,.0f} rows/s  "
            f"p50 {lat['p50']:.2f}  p99 {lat['p99']:.2f} ms  failed {r['failures']}  "
            f"cpu other {r['cpu']['other_pct']:.0f}%"
        )
    print(f"[{i:>3}/{total} {clock}] {run.label:<48} {text}", flush=True)


def run_plan(
    plan: Sequence[Group], ctxs: dict[str, BundleCtx], workdir: Path, args: argparse.Namespace
) -> dict[str, list[dict[str, Any]]]:
    runs: list[dict[str, Any]] = []
    servers: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    failed: list[str] = []
    total, i, t0 = sum(len(g.runs) for g in plan), 0, time.monotonic()
    for group in plan:
        spec = group.server
        record: dict[str, Any] = {
            "label": spec.label,
            "kind": spec.kind,
            "bundle": spec.bundle,
            "workers": spec.workers,
            "audit": spec.audit,
            "serves": "-",
            "error": None,
        }
        done = 0
        try:
            with launch(spec, ctxs[spec.bundle], workdir, not args.quick) as srv:
                record.update(cold_start_s=round(srv.cold_start_s, 3), serves=srv.serves)
                record.update(argv=srv.argv, env=srv.env, port=srv.port)
                for run in group.runs:
                    i, done = i + 1, done + 1
                    try:
                        r = measure(srv, run, ctxs[spec.bundle], args)
                    except (WrkError, RuntimeError, OSError) as exc:
                        failed.append(f"{run.label}: {exc}")
                        progress(i, total, t0, run, str(exc))
                        continue
                    runs.append(r)
                    progress(i, total, t0, run, r)
                    if r["failures"] or r["ok"] == 0:
                        why = f"{r['failures']} failed, {r['ok']} ok: {r['first_bad'][:200]}"
                        failed.append(f"{run.label}: {why}")
                    if "rss_mb" not in record:
                        record["rss_mb"] = rss(srv.pid)  # after the first warm-up and run
                record.setdefault("rss_mb", rss(srv.pid))["worker_end"] = rss(srv.pid)["worker"]
        except (MlserverUnavailable, PostgresUnavailable) as exc:
            record["error"] = str(exc)
            skipped.append({"what": spec.label, "reason": str(exc)})
            print(f"[skip] {spec.label}: {str(exc).splitlines()[0]}", flush=True)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            record["error"] = str(exc)
            failed += [f"{r.label}: server failed: {str(exc)[:300]}" for r in group.runs[done:]]
            print(f"[fail] {spec.label}: {str(exc)[:500]}", flush=True)
        i += len(group.runs) - done
        servers.append(record)
    return {"runs": runs, "servers": servers, "skipped": skipped, "failed_runs": failed}


def python_loop_ms() -> float:
    """Best of 5 timings of a fixed pure-Python loop: this machine's speed at the moment.

    The vCPUs' speed varies with what else the host runs; figures taken on different days
    compare through this number. Other load in this VM inflates it too (time slicing).
    """
    best = float("inf")
    for _ in range(5):
        t0, acc = time.perf_counter(), 0
        for k in range(1_000_000):
            acc += k * k
        best = min(best, time.perf_counter() - t0)
    return round(best * 1e3, 1)


def machine() -> dict[str, Any]:
    import onnxruntime

    wrk_v = subprocess.run([wrk_binary(), "-v"], capture_output=True, text=True)
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "wrk": (wrk_v.stdout or wrk_v.stderr).splitlines()[0],
        "loadavg_1m_before": round(os.getloadavg()[0], 2),
        "python_loop_ms_before": python_loop_ms(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv, __doc__.split("\n\n")[0])
    procs.install_cleanup()
    wrk_binary()  # no wrk, no benchmark: fail now rather than after the floors
    baseline = str(args.baseline.resolve()) if args.baseline is not None else ""
    base_store = str(args.baseline_store.resolve()) if args.baseline_store is not None else ""
    plan = build_plan(
        args.bundle_list, args.mode, args.rounds, baseline, base_store, args.chain_cost
    )
    if any(r.route == "grpc" for g in plan for r in g.runs):
        h2load_binary()
    skipped_ml = [g for g in plan if g.server.kind == "mlserver"] if args.skip_mlserver else []
    plan = [g for g in plan if g not in skipped_ml]
    est = estimate_seconds(plan, args.duration, args.warmup, args.mode)
    n_runs = sum(len(g.runs) for g in plan)
    print(
        f"serve_speed {args.mode}: {n_runs} runs on {len(plan)} server starts, "
        f"{args.duration:g} s each after {args.warmup:g} s warm-up; "
        f"estimated {est / 60:.1f} min, plus up to {n_runs * args.quiet_wait / 60:.1f} min "
        "waiting for a quiet machine and the training of missing bundles",
        flush=True,
    )
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    t0 = time.monotonic()
    info = machine()
    store = args.store.resolve()
    with tempfile.TemporaryDirectory(prefix="serve-speed-") as tmp:
        workdir = Path(tmp)
        ctxs, floors = {}, {}
        for name in args.bundle_list:
            ctxs[name], rows = prepare_bundle(store, name, workdir)
            reps = (200, 10) if args.quick else (2000, 100)
            floors[name] = in_process_floor(
                store, name, rows, repeats_one=reps[0], repeats_batch=reps[1]
            )
            print(f"in-process floor {name}: {json.dumps(floors[name])}", flush=True)
        result = run_plan(plan, ctxs, workdir, args)
    result["skipped"] += [{"what": g.server.label, "reason": "--skip-mlserver"} for g in skipped_ml]
    info.update(
        loadavg_1m_after=round(os.getloadavg()[0], 2), python_loop_ms_after=python_loop_ms()
    )
    report = {
        "benchmark": "serve_speed",
        "started_utc": started,
        "mode": args.mode,
        "bundles": args.bundle_list,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "estimated_s": round(est),
        "elapsed_s": round(time.monotonic() - t0, 1),
        "machine": info,
        "floor": floors,
        **result,
        "ratios": compute_ratios(result["runs"], floors),
    }
    write_results(args.out, f"serve_speed-{started}", report, markdown(report))
    if report["failed_runs"]:
        print(f"\n{len(report['failed_runs'])} run(s) had failures: see above", flush=True)
        # --quick is the harness's own check: every planned run must have worked.
        return 1 if args.quick else 0
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        # The finally blocks have stopped every server by the time this prints.
        print("\ninterrupted; every server was stopped", file=sys.stderr)
        sys.exit(130)
