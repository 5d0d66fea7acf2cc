"""Single-row latency of the served mixture: uvicorn over HTTP, and the bare predictor.

For each bundle (the 5-expert simulation demo and the 5-expert california-housing
regression), the script

1. times ``BundlePredictor.predict`` in this process on one prepared row (no HTTP, no JSON,
   no audit), and
2. starts ``uvicorn app.main:create_app --factory`` (one worker) on 127.0.0.1 and times
   single-row ``POST /predict`` calls from one client over one keep-alive connection, once
   per audit setting: a SQLite trail on disk with each ``IABMA_AUDIT_PAYLOAD``, the same on
   tmpfs (fsync is free there, which isolates the cost of a durable commit), and no trail
   at all (``IABMA_AUDIT_ENABLED=false``, where the app has that setting).

Bundles missing from ``--store`` are trained first (demo ~5 s, california ~150 s). The
figures go to ``--out`` as JSON and to the terminal as a table.

    .venv/bin/python bench/serve_latency.py --store bench/results/store --requests 2000
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from app.bundle.loader import BundleError, open_bundle, resolve_version  # noqa: E402
from app.bundle.predictor import BundlePredictor  # noqa: E402
from app.inputs import FeatureTable, instance_field  # noqa: E402
from app.settings import Settings  # noqa: E402

# bundle name -> `iabma train --dataset` value
BUNDLES = {"demo": "simulation", "california": "california"}
# (where the SQLite trail lives, IABMA_AUDIT_PAYLOAD); "none" turns the trail off.
AUDIT_MODES = (
    ("disk", "hash"),
    ("disk", "full"),
    ("disk", "off"),
    ("tmpfs", "hash"),
    ("none", "-"),
)
TMPFS = Path("/dev/shm")
N_ROWS = 500


@dataclass(frozen=True)
class Result:
    bundle: str
    experts: int
    path: str  # "in-process" or "http"
    audit: str
    n: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    audit_commit_mean_ms: float | None = None  # from the app's /metrics


def summarise(
    bundle: str,
    experts: int,
    path: str,
    audit: str,
    seconds: Sequence[float],
    commit_ms: float | None = None,
) -> Result:
    ms = np.asarray(seconds) * 1e3
    return Result(
        bundle=bundle,
        experts=experts,
        path=path,
        audit=audit,
        n=len(ms),
        p50_ms=round(float(np.percentile(ms, 50)), 3),
        p99_ms=round(float(np.percentile(ms, 99)), 3),
        mean_ms=round(float(ms.mean()), 3),
        audit_commit_mean_ms=None if commit_ms is None else round(commit_ms, 3),
    )


def mean_commit_ms(metrics_text: str) -> float | None:
    """Mean group-commit time of the audit trail, from the Prometheus exposition."""
    totals = {"sum": 0.0, "count": 0.0}
    for line in metrics_text.splitlines():
        for kind in totals:
            if line.startswith(f"iabma_audit_commit_duration_seconds_{kind}"):
                totals[kind] += float(line.rsplit(" ", 1)[1])
    return totals["sum"] / totals["count"] * 1e3 if totals["count"] else None


def ensure_bundle(store: Path, name: str) -> Path:
    try:
        return resolve_version(store, name)
    except BundleError:
        print(f"training {name!r} into {store} (dataset {BUNDLES[name]}) ...", flush=True)
    subprocess.run(
        [sys.executable, "-m", "training.cli", "train", "--dataset", BUNDLES[name],
         "--store", str(store), "--name", name, "--quiet"],
        cwd=REPO, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return resolve_version(store, name)


def sample_rows(name: str, feature_names: Sequence[str]) -> list[dict[str, Any]]:
    """Real inputs: the first rows of the dataset the bundle was trained on."""
    from training.datasets import load_shared, simulate

    data = simulate(N_ROWS, 12_345) if BUNDLES[name] == "simulation" else load_shared(name)
    frame = data.X[list(feature_names)].head(N_ROWS)
    rows = []
    for record in frame.to_dict(orient="records"):
        rows.append(
            {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in record.items()}
        )
    return rows


def time_calls(call: Callable[[int], None], n: int, warmup: int, label: str) -> list[float]:
    for i in range(warmup):
        call(i)
    out = []
    for i in tqdm(range(n), desc=label, unit="req", leave=False):
        t0 = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - t0)
    return out


def in_process(name: str, path: Path, n: int, warmup: int) -> Result:
    bundle = open_bundle(path, intra_op_threads=1)
    predictor = BundlePredictor(bundle)
    table = FeatureTable.from_manifest(bundle.manifest, "reject")
    rows = sample_rows(name, table.names)
    # Columns are built outside the timed call: this is the ONNX graphs plus the mixture.
    columns = [table.columns([row], instance_field) for row in rows]
    seconds = time_calls(
        lambda i: predictor.predict(columns[i % len(columns)]), n, warmup, f"{name} in-process"
    )
    return summarise(name, len(bundle.manifest.experts), "in-process", "none", seconds)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def uvicorn_server(env: dict[str, str], workdir: Path) -> Iterator[int]:
    port = free_port()
    log = workdir / f"uvicorn-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
             "--host", "127.0.0.1", "--port", str(port), "--timeout-keep-alive", "75"],
            cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"uvicorn did not become ready:\n{tail}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    conn.close()
                    break
                conn.close()
            except OSError:
                pass
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def over_http(
    name: str,
    store: Path,
    experts: int,
    audit: tuple[str, str],
    n: int,
    warmup: int,
    workdir: Path,
) -> Result:
    where, payload = audit
    manifest = open_bundle(resolve_version(store, name)).manifest
    rows = sample_rows(name, [f.name for f in manifest.features])
    bodies = [json.dumps({"instances": [row]}).encode() for row in rows]
    audit_dir = Path(tempfile.mkdtemp(dir=TMPFS if where == "tmpfs" else workdir))
    audit_db = audit_dir / f"audit-{name}-{payload}.db"
    trail = {"IABMA_AUDIT_ENABLED": "false"} if where == "none" else {}
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("IABMA_")},
        "IABMA_STORE": str(store),
        "IABMA_MODEL_NAME": name,
        "IABMA_AUDIT_URL": f"sqlite:///{audit_db}",
        "IABMA_AUDIT_PAYLOAD": payload if payload != "-" else "hash",
        **trail,
    }
    with uvicorn_server(env, workdir) as port:
        # http.client rather than httpx: httpx's own overhead (~4 ms, TOOLCHAIN.md) would
        # hide the server's time. One connection, kept alive, like a pooled client.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Content-Type": "application/json"}

        def call(i: int) -> None:
            conn.request("POST", "/predict", bodies[i % len(bodies)], headers)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"POST /predict answered {resp.status}: {body[:300]!r}")

        try:
            seconds = time_calls(call, n, warmup, f"{name} http audit={where},{payload}")
            conn.request("GET", "/metrics")
            commit_ms = mean_commit_ms(conn.getresponse().read().decode())
        finally:
            conn.close()
            shutil.rmtree(audit_dir, ignore_errors=True)
    label = "off" if where == "none" else f"sqlite {where}, {payload}"
    return summarise(name, experts, "http", label, seconds, commit_ms)


def table(results: Sequence[Result]) -> str:
    head = (
        f"{'bundle':<11}{'experts':>8}  {'path':<11}{'audit trail':<20}"
        f"{'p50 ms':>9}{'p99 ms':>9}{'commit ms':>11}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        commit = "-" if r.audit_commit_mean_ms is None else f"{r.audit_commit_mean_ms:.3f}"
        lines.append(
            f"{r.bundle:<11}{r.experts:>8}  {r.path:<11}{r.audit:<20}"
            f"{r.p50_ms:>9.3f}{r.p99_ms:>9.3f}{commit:>11}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store", type=Path, default=None,
        help="bundle store; missing bundles are trained into it (default: a temporary one)",
    )  # fmt: skip
    parser.add_argument("--requests", type=int, default=2000, help="timed requests per case")
    parser.add_argument("--warmup", type=int, default=200, help="untimed requests first")
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "serve_latency.json"
    )
    parser.add_argument("--bundles", nargs="+", choices=sorted(BUNDLES), default=list(BUNDLES))
    args = parser.parse_args(argv)
    if args.requests < 100 or args.warmup < 0:
        parser.error("--requests must be at least 100 (for a p99), --warmup at least 0")

    # Older app versions have no IABMA_AUDIT_ENABLED; their lightest trail is payload=off.
    can_disable_audit = "audit_enabled" in Settings.model_fields
    # Other work on the machine moves the p99 most; the load is recorded beside the figures.
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="serve-latency-") as tmp:
        workdir = Path(tmp)
        store = (args.store or workdir / "store").resolve()
        store.mkdir(parents=True, exist_ok=True)
        results: list[Result] = []
        for name in args.bundles:
            path = ensure_bundle(store, name)
            raw = in_process(name, path, args.requests, args.warmup)
            results.append(raw)
            for audit in AUDIT_MODES:
                if audit[0] == "tmpfs" and not TMPFS.is_dir():
                    continue
                if audit[0] == "none" and not can_disable_audit:
                    continue
                results.append(
                    over_http(name, store, raw.experts, audit, args.requests, args.warmup, workdir)
                )

    import onnxruntime

    report = {
        "benchmark": "single-row POST /predict, 1 client, keep-alive, uvicorn 1 worker",
        "requests": args.requests,
        "warmup": args.warmup,
        "audit_trail_can_be_disabled": can_disable_audit,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__,
            "loadavg_1m_before": round(load_before, 2),
            "loadavg_1m_after": round(os.getloadavg()[0], 2),
        },
        "results": [asdict(r) for r in results],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table(results))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
