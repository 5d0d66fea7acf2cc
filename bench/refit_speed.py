"""Refit speed: ``iabma refit`` on ``--rows`` (100,000) outcome rows within 30 s.

The demo bundle's real answers are written into a SQLite trail through the app's own store
(``bench/speed/trail.py``: records of 10 rows, inputs kept in full); our server then takes
an outcome for every row through ``POST /feedback``, each drawn from the ``lda`` expert's
served probabilities. ``iabma refit --no-publish`` then runs ``--repeats`` times, each in a
fresh process as a user runs it, its progress bar on the terminal; the median wall time is
the figure. Figures go to ``<out>/refit_speed-<UTC>.json`` and ``.md``, and the terminal.

    .venv/bin/python bench/refit_speed.py                 # ~2 min on 2 cores
    .venv/bin/python bench/refit_speed.py --rows 20000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.peers.procs import free_port_between  # noqa: E402
from bench.speed.bundles import ensure_bundle  # noqa: E402
from bench.speed.trail import request_id, seed, serve  # noqa: E402

# The port range this machine's benchmarks may use.
PORTS = (18100, 18199)
TARGET_S = 30.0
ROWS_PER_RECORD, BATCH = 10, 1000
TRUTH = "lda"


def post_outcomes(base: str, info: dict[str, Any], rng: np.random.Generator) -> float:
    """An outcome for every seeded row, drawn from ``TRUTH``'s served probabilities."""
    j = info["experts"].index(TRUTH)
    p1 = info["expert_proba"][:, j, 1]
    labels = (rng.random(len(p1)) < p1).astype(int)
    items = [
        {"request_id": request_id("refit", i // ROWS_PER_RECORD), "row": i % ROWS_PER_RECORD,
         "outcome": int(labels[i])}
        for i in range(len(p1))
    ]  # fmt: skip
    began = time.perf_counter()
    with httpx.Client(base_url=base, timeout=120) as client:
        for start in range(0, len(items), BATCH):
            r = client.post("/feedback", json={"outcomes": items[start : start + BATCH]})
            r.raise_for_status()
    return time.perf_counter() - began


def run_refit(store: Path, url: str) -> dict[str, Any]:
    """One ``iabma refit --no-publish`` in a fresh process: its wall time and phases."""
    iabma = Path(sys.executable).parent / "iabma"
    cmd = [str(iabma), "refit", "--store", str(store), "--name", "demo", "--audit-url", url]
    began = time.perf_counter()
    done = subprocess.run([*cmd, "--no-publish"], cwd=REPO, stdout=subprocess.PIPE, text=True)
    wall = time.perf_counter() - began
    print(done.stdout, flush=True)
    if done.returncode != 0:
        raise SystemExit(f"iabma refit failed with exit code {done.returncode}")
    timings = re.search(
        r"read ([\d.]+) s, experts and gate ([\d.]+) s, export ([\d.]+) s", done.stdout
    )
    nll = re.search(r"\(([^)]+)\)\s+([\d.]+).*\nrefitted\s+([\d.]+)", done.stdout)
    assert timings is not None and nll is not None, "iabma refit's report changed"
    read_s, fit_s, export_s = (float(t) for t in timings.groups())
    return {
        "wall_s": round(wall, 2),
        "read_s": read_s,
        "experts_and_gate_s": fit_s,
        "export_s": export_s,
        "served_nll": float(nll.group(2)),
        "refitted_nll": float(nll.group(3)),
    }


def report(result: dict[str, Any]) -> str:
    runs = result["runs"]
    lines = [
        f"# iabma refit on {result['rows']:,} outcome rows ({result['utc']})",
        "",
        f"{result['cpus']} cores, shared with other work while it ran; "
        f"{result['repeats']} runs, each a fresh process.",
        "",
        "| run | wall | read trail | experts + gate | export | held-out NLL served → refitted |",
        "|---|---|---|---|---|---|",
    ]
    for k, r in enumerate(runs, 1):
        lines.append(
            f"| {k} | {r['wall_s']:.1f} s | {r['read_s']:.1f} s | {r['experts_and_gate_s']:.1f} s"
            f" | {r['export_s']:.1f} s | {r['served_nll']:.4f} → {r['refitted_nll']:.4f} |"
        )
    verdict = "met" if result["median_wall_s"] <= TARGET_S else "NOT met"
    lines += [
        "",
        f"median wall {result['median_wall_s']:.1f} s (target ≤ {TARGET_S:.0f} s: {verdict}); "
        f"seeding {result['seed_s']:.1f} s, posting the outcomes {result['feedback_s']:.1f} s",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000, help="outcome rows (a multiple of 10)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    if args.rows < 1000 or args.rows % ROWS_PER_RECORD:
        p.error("--rows must be a multiple of 10, at least 1,000")
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory(prefix="refit_speed-") as tmp:
        work = Path(tmp)
        store = work / "store"
        version_dir = ensure_bundle(store, "demo")
        url = f"sqlite:///{work / 'audit.db'}"
        began = time.perf_counter()
        info = seed(
            version_dir, url, args.rows // ROWS_PER_RECORD, 1.0, rng, rows=ROWS_PER_RECORD,
            prefix="refit", input_mode="full",
        )  # fmt: skip
        seed_s = time.perf_counter() - began
        with serve(store, "demo", url, work, port=free_port_between(*PORTS)) as base:
            feedback_s = post_outcomes(base, info, rng)
        runs = [run_refit(store, url) for _ in range(args.repeats)]
    result = {
        "utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "rows": args.rows,
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "seed_s": round(seed_s, 1),
        "feedback_s": round(feedback_s, 1),
        "runs": runs,
        "median_wall_s": statistics.median(r["wall_s"] for r in runs),
        "target_s": TARGET_S,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"refit_speed-{result['utc'].replace(':', '')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
    text = report(result)
    stem.with_suffix(".md").write_text(text)
    print(text)
    return 0 if result["median_wall_s"] <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
