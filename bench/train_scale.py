"""How training and serving cost grow with the training rows (issue 31).

For each size (20k, 100k, 1M rows of a generated 20-column CSV: 14 numeric columns, 6
categorical ones, missing cells, a binary target with two regimes) it runs
``iabma train --csv … --n-jobs 2`` as a user would, in a fresh process, and records:

- the wall time of each stage (from the manifest) and in all;
- the peak RSS of every process of the run (the CLI, its loky workers, Dask's workers),
  sampled every 0.2 s with psutil;
- the bundle's size on disk;
- then serves the bundle (audit off, 1 uvicorn worker, port 18300-18399) and measures
  ``/predict`` p50 at 1 row and at 1000 rows, and the server's RSS after them.

``--scheduler`` runs the fits on a ``LocalCluster`` of 2 workers, each limited to
``--worker-memory``; with ``--compare`` it also checks that every graph of that bundle is
byte-identical to the local run's of the same size.

Writes ``bench/results/train_scale-<UTC time>.json`` and ``.md``, a plot of cost against
rows (``.png``), and prints the table.

    .venv/bin/python bench/train_scale.py --rows 20000 100000
    .venv/bin/python bench/train_scale.py --rows 1000000 --scheduler --compare
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.peers.ours import READY_PATH, OursSettings, ours_command  # noqa: E402
from bench.peers.procs import free_port, server  # noqa: E402
from bench.speed.peak_rss import GB, PeakRss  # noqa: E402

RESULTS = ROOT / "bench" / "results"
#: The issue's targets: (rows, every process's peak RSS in GB, training wall in s).
TARGETS = {1_000_000: (6.0, 900.0), 100_000: (3.0, None)}


def make_scale_csv(path: Path, n: int, seed: int = 0) -> pd.DataFrame:
    """Write :func:`scale_frame` to ``path``; return the frame."""
    frame = scale_frame(n, seed)
    frame.to_csv(path, index=False, float_format="%.5g")
    return frame


def scale_frame(n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` rows: 14 numeric columns, 6 categorical ones, and a binary ``y``.

    Two regimes: where ``num0 > 0.5`` the class follows a ring in (num1, num2); elsewhere
    a linear score of several columns and one category. Some cells are missing.
    """
    rng = np.random.default_rng(seed)
    cols: dict[str, Any] = {f"num{i}": rng.normal(size=n).astype(np.float32) for i in range(14)}
    levels = [3, 5, 8, 12, 30, 200]
    for i, k in enumerate(levels):
        cols[f"cat{i}"] = np.asarray([f"c{i}_{j}" for j in range(k)])[rng.integers(0, k, n)]
    frame = pd.DataFrame(cols)
    ring = frame.num1**2 + frame.num2**2
    linear = frame.num3 - 0.8 * frame.num4 + 0.5 * frame.num5 + (frame.cat0 == "c0_1") * 1.0
    logit = np.where(frame.num0 > 0.5, 3.0 * (ring - 1.4), 1.5 * linear)
    frame["y"] = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    for name in ("num6", "num7", "cat3"):  # about 3% missing
        frame.loc[rng.random(n) < 0.03, name] = None
    return frame


def train(csv: Path, store: Path, name: str, scheduler: str | None) -> dict[str, Any]:
    argv = [
        str(Path(sys.executable).parent / "iabma"),
        "train",
        "--csv",
        str(csv),
        "--target",
        "y",
        "--task",
        "classification",
        "--n-jobs",
        "2",
        "--quiet",
        "--store",
        str(store),
        "--name",
        name,
    ]
    if scheduler:
        argv += ["--scheduler", scheduler]
    t0 = time.perf_counter()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    log = store / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        with PeakRss(proc.pid) as rss:
            code = proc.wait()
    wall = time.perf_counter() - t0
    # CPU of the CLI and its reaped workers (not Dask's, which are the bench's children):
    # on a shared machine the wall time says more about the neighbours than about us.
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
    if code != 0:
        raise SystemExit(f"training {name} failed ({code}); see {log}:\n{log.read_text()[-3000:]}")
    version = store / name / (store / name / "LATEST").read_text().strip()
    manifest = json.loads((version / "manifest.json").read_text())
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "stages_s": manifest["training"]["seconds"],
        "rss": rss.summary(),
        "bundle_mb": round(
            sum(f.stat().st_size for f in version.rglob("*") if f.is_file()) / 1e6, 2
        ),
        "test_nll": manifest.get("metrics", {}).get("iabma", {}).get("nll"),
        "version_dir": str(version),
        "graphs_sha256": {
            str(f.relative_to(version)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(version.rglob("*.onnx"))
        },
    }


def _post(url: str, body: bytes) -> float:
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as resp:
        resp.read()
    return (time.perf_counter() - t0) * 1000


@contextmanager
def serving(store: Path, name: str, workdir: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    audit = f"sqlite:///{workdir / f'audit-{name}.db'}"
    argv, env = ours_command(OursSettings(store, name, 1, "off", audit), port)
    log = workdir / f"serve-{name}.log"
    with server(argv, env, ROOT, log, port, READY_PATH) as (proc, _):
        yield f"http://127.0.0.1:{port}", proc.pid


def serve_costs(store: Path, name: str, frame: pd.DataFrame, workdir: Path) -> dict[str, Any]:
    rows = frame.drop(columns="y").sample(1000, random_state=1)
    instances = json.loads(rows.to_json(orient="records"))
    one = [json.dumps({"instances": [r]}).encode() for r in instances[:200]]
    many = json.dumps({"instances": instances}).encode()
    with serving(store, name, workdir) as (base, pid):
        url = base + "/predict"
        for body in one[:20]:
            _post(url, body)  # warm-up
        p1 = [_post(url, body) for body in one]
        _post(url, many)
        p1000 = [_post(url, many) for _ in range(30)]
        server = psutil.Process(pid)
        rss = sum(p.memory_info().rss for p in [server, *server.children(recursive=True)])
    return {
        "p50_1row_ms": round(statistics.median(p1), 3),
        "p50_1000rows_ms": round(statistics.median(p1000), 2),
        "server_rss_mb": round(rss / 1e6, 1),
    }


@contextmanager
def local_cluster(memory: str) -> Iterator[str]:
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, memory_limit=memory, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


def run_case(n: int, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    csv = workdir / f"scale-{n}.csv"
    t0 = time.perf_counter()
    frame = make_scale_csv(csv, n, args.seed)
    print(f"[{n} rows] wrote {csv.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.0f} s")
    store = workdir / "store"
    store.mkdir(exist_ok=True)
    out: dict[str, Any] = {"rows": n, "csv_mb": round(csv.stat().st_size / 1e6, 1)}
    runs = [("local", None)] if not args.scheduler or args.compare else []
    if args.scheduler:
        runs.append(("dask", "cluster"))
    for label, sched in runs:
        name = f"scale{n}{label}"
        print(f"[{n} rows] training ({label}) ...", flush=True)
        if sched:
            with (
                local_cluster(args.worker_memory) as address,
                PeakRss(psutil.Process().pid) as workers,
            ):
                res = train(csv, store, name, address)
            res["dask_workers_rss"] = workers.summary(exclude=psutil.Process().pid)
        else:
            res = train(csv, store, name, None)
        print(f"[{n} rows] {label}: {res['wall_s']} s, peak {res['rss']['max_gb']} GB", flush=True)
        res.update(serve_costs(store, name, frame, workdir))
        out[label] = res
    if "local" in out and "dask" in out:
        a, b = out["local"]["graphs_sha256"], out["dask"]["graphs_sha256"]
        out["dask_same_graphs"] = a == b
    return out


def plot(cases: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [c["rows"] for c in cases]
    runs = [c.get("local") or c["dask"] for c in cases]
    panels = [
        ("training wall (s)", [r["wall_s"] for r in runs]),
        ("peak RSS, largest process (GB)", [r["rss"]["max_gb"] for r in runs]),
        ("bundle (MB)", [r["bundle_mb"] for r in runs]),
        ("/predict p50, 1 row (ms)", [r["p50_1row_ms"] for r in runs]),
        ("/predict p50, 1000 rows (ms)", [r["p50_1000rows_ms"] for r in runs]),
        ("server RSS (MB)", [r["server_rss_mb"] for r in runs]),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5))
    for ax, (title, values) in zip(axes.ravel(), panels, strict=True):
        ax.plot(rows, values, "o-")
        ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training rows")
        ax.set_ylim(bottom=0)
    fig.suptitle("iabma train --n-jobs 2, 20 columns: cost against rows")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def table(cases: list[dict[str, Any]]) -> str:
    head = (
        "| rows | run | train wall (s) | CPU (s) | stages (s) | peak RSS, largest process (GB) | "
        "bundle (MB) | p50 1 row (ms) | p50 1000 rows (ms) | server RSS (MB) | test NLL |"
    )
    lines = [head, "|" + "---|" * 11]
    for c in cases:
        for label in ("local", "dask"):
            if label not in c:
                continue
            r = c[label]
            stages = ", ".join(f"{k} {v}" for k, v in r["stages_s"].items())
            lines.append(
                f"| {c['rows']:,} | {label} | {r['wall_s']} | {r['cpu_s']} | {stages} | "
                f"{r['rss']['max_gb']} | "
                f"{r['bundle_mb']} | {r['p50_1row_ms']} | {r['p50_1000rows_ms']} | "
                f"{r['server_rss_mb']} | {r['test_nll']} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[20_000, 100_000, 1_000_000])
    p.add_argument("--scheduler", action="store_true", help="fit on a 2-worker LocalCluster")
    p.add_argument("--compare", action="store_true", help="with --scheduler: run locally too")
    p.add_argument("--worker-memory", default="6GB", help="each Dask worker's limit")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    cases = []
    with tempfile.TemporaryDirectory(prefix="train_scale-") as tmp:
        for n in args.rows:
            cases.append(run_case(n, Path(tmp), args))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    base = RESULTS / f"train_scale-{stamp}"
    record = {
        "machine": {
            "cpus": psutil.cpu_count(),
            "ram_gb": round(psutil.virtual_memory().total / GB),
            "note": "shared with other work while it ran",
        },
        "cases": cases,
    }
    base.with_suffix(".json").write_text(json.dumps(record, indent=1))
    text = table(cases)
    base.with_suffix(".md").write_text(text + "\n")
    plot(cases, base.with_suffix(".png"))
    print(text)
    for c in cases:
        if "dask_same_graphs" in c:
            same = c["dask_same_graphs"]
            print(f"{c['rows']:,} rows: the Dask bundle's graphs are the local run's: {same}")
    print(f"wrote {base}.json, .md, .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
