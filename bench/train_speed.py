"""End-to-end ``iabma train`` wall time: reading, experts with cross-fitting, gate, export.

Each case runs the CLI as a user would (a fresh process, ``--quiet``) on one machine, in
one run, and reads the stage timings the CLI records in the bundle's manifest. Cases:

- ``mixed20k``: a seeded 20,000-row, 15-column CSV with numeric, numeric-as-text and
  categorical columns, awkward headers (spaces, hyphens, unicode, ``weights``), missing
  cells, ``"unknown"`` as a category and a 400-level column; classification;
- every shared dataset (``simulation``, ``spambase``, ``credit-g``, ``bike``,
  ``california``) with the default experts.

Each case runs serially and with the experts' cross-fitting in 2 processes
(``--n-jobs 2``); the table gives both and their ratio.

Writes ``bench/results/train_speed-<UTC time>.json`` and ``.md`` and prints the table.

    .venv/bin/python bench/train_speed.py                  # every case, 1 and 2 jobs
    .venv/bin/python bench/train_speed.py --cases california --jobs 2 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SHARED = ("simulation", "spambase", "credit-g", "bike", "california")
#: (case, n_jobs) -> seconds: the targets the project set itself.
TARGET_SECONDS = {("mixed20k", 1): 30.0, ("california", 2): 30.0}


def make_mixed_csv(path: Path, n: int = 20_000, seed: int = 0) -> None:
    """15 columns (14 features and the target) of the kinds real files mix."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 90, n)
    income = rng.lognormal(10, 0.6, n).round(2)
    hours = rng.normal(40, 9, n).round(1)
    df = pd.DataFrame(
        {
            "age": age,
            "annual income (€)": income,
            "hours-per-week": [f" {h} " for h in hours],  # numbers written as text
            "education-num": rng.integers(1, 17, n),
            "capital.gain": np.where(rng.random(n) < 0.9, 0, rng.integers(100, 99_999, n)),
            "größe_cm": rng.normal(172, 9, n).round(0),
            "1st score": rng.normal(size=n).round(4),
            "weights": rng.gamma(2.0, 2.0, n).round(3),
            "tenure months": rng.integers(0, 240, n),
            "contact": rng.choice(["cellular", "telephone", "unknown"], n, p=[0.6, 0.1, 0.3]),
            "work class": rng.choice([" Private", " Self-emp", " Gov", "?"], n),
            "marital-status": rng.choice(["married", "single", "divorced", "widowed"], n),
            "region": rng.choice([f"r{k:03d}" for k in range(400)], n),
            "smoker": rng.choice(["yes", "no", ""], n, p=[0.2, 0.75, 0.05]),
        }
    )
    missing = rng.random((n, 3)) < 0.03
    df.loc[missing[:, 0], "annual income (€)"] = np.nan
    df.loc[missing[:, 1], "größe_cm"] = np.nan
    df.loc[missing[:, 2], "tenure months"] = np.nan
    logit = (
        0.04 * (age - 45)
        + 0.6 * np.log(np.nan_to_num(income, nan=22_000) / 22_000)
        + 0.05 * (hours - 40)
        + 0.15 * (df["education-num"] - 9)
        + 0.8 * (df["contact"] == "unknown")
        - 0.5 * (df["marital-status"] == "single")
        + rng.normal(0, 1.0, n)
    )
    df["label"] = np.where(logit > 0, ">50K", "<=50K")
    df.to_csv(path, index=False)


def case_args(case: str, csv: Path) -> list[str]:
    if case == "mixed20k":
        return ["--csv", str(csv), "--target", "label", "--task", "classification"]
    return ["--dataset", case]


def run_case(case: str, csv: Path, store: Path, seed: int, jobs: int) -> dict[str, Any]:
    name = f"{case.replace('-', '_')}_{seed}_{jobs}"
    argv = [sys.executable, "-m", "training.cli", "train", *case_args(case, csv)]
    argv += ["--store", str(store), "--name", name, "--seed", str(seed), "--quiet"]
    argv += ["--n-jobs", str(jobs)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{case}: iabma train exited {proc.returncode}:\n{proc.stderr}")
    version = (store / name / "LATEST").read_text().strip()
    manifest = json.loads((store / name / version / "manifest.json").read_text())
    training = manifest["training"]
    stages = dict(training.get("seconds", {}))
    stages["fit"] = training["fit_seconds"]
    return {
        "case": case,
        "jobs": jobs,
        "seed": seed,
        "wall_seconds": round(wall, 2),
        "stages": stages,
        "rows": training["n_train_rows"] + training["n_test_rows"],
        "features": len(manifest["features"]),
        "experts": [e["name"] for e in manifest["experts"]],
        # The shipped gate and its test NLL against the plain combiners (iabma train's).
        "gate": manifest["gate"]["params"].get("selected", {}).get("gate", "network"),
        "versus_plain": training.get("versus_plain"),
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per ``case/jobs``: medians of the wall time and of each stage."""
    out: dict[str, dict[str, Any]] = {}
    for case, jobs in dict.fromkeys((r["case"], r["jobs"]) for r in runs):
        mine = [r for r in runs if r["case"] == case and r["jobs"] == jobs]
        walls = [r["wall_seconds"] for r in mine]
        stages = {
            k: statistics.median(r["stages"][k] for r in mine if k in r["stages"])
            for k in mine[0]["stages"]
        }
        out[f"{case}/{jobs}"] = {
            "case": case,
            "jobs": jobs,
            "rows": mine[0]["rows"],
            "features": mine[0]["features"],
            "median_wall_seconds": statistics.median(walls),
            "max_wall_seconds": max(walls),
            "median_stage_seconds": stages,
            "target_seconds": TARGET_SECONDS.get((case, jobs)),
        }
    for s in out.values():
        serial = out.get(f"{s['case']}/1")
        s["speedup_vs_serial"] = (
            serial["median_wall_seconds"] / s["median_wall_seconds"] if serial else None
        )
    return out


def table(summary: dict[str, dict[str, Any]], repeats: int) -> str:
    lines = [
        f"| case | jobs | rows × features | wall (median of {repeats}) | vs serial | experts "
        "| gate | evaluate | rest (start-up, export) | target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary.values():
        st = s["median_stage_seconds"]
        target = "–"
        if s["target_seconds"]:
            met = "met" if s["median_wall_seconds"] <= s["target_seconds"] else "NOT met"
            target = f"≤ {s['target_seconds']:.0f} s: {met}"
        speedup = f"{s['speedup_vs_serial']:.2f}×" if s["speedup_vs_serial"] else "–"
        named = sum(st.get(k, 0) for k in ("load", "experts", "gate", "evaluate"))
        rest = s["median_wall_seconds"] - named
        lines.append(
            f"| {s['case']} | {s['jobs']} | {s['rows']} × {s['features']} "
            f"| {s['median_wall_seconds']:.1f} s | {speedup} | {st.get('experts', 0):.1f} s "
            f"| {st.get('gate', 0):.2f} s | {st.get('evaluate', 0):.1f} s "
            f"| {rest:.1f} s | {target} |"
        )
    return "\n".join(lines)


def quality_table(runs: list[dict[str, Any]]) -> str:
    """Per run: the shipped gate's test NLL against the better plain combiner."""
    lines = [
        "| case | jobs | seed | shipped gate | test NLL | better plain | its NLL | difference "
        "| bootstrap SE | within 1 SE |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        v = r.get("versus_plain")
        if not v:
            continue
        lines.append(
            f"| {r['case']} | {r['jobs']} | {r['seed']} | {r['gate']} | {v['nll']:.4f} "
            f"| {v['rival']} | {v['rival_nll']:.4f} | {v['difference']:+.4f} "
            f"| {v['se_difference']:.4f} | {'yes' if v['within_one_se'] else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(("mixed20k", *SHARED)))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--jobs", default="1,2", help="n_jobs values to run, e.g. 1,2")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - {"mixed20k", *SHARED})
    if unknown:
        parser.error(f"unknown cases {unknown}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="iabma-train-speed-") as tmp:
        csv = Path(tmp) / "mixed20k.csv"
        make_mixed_csv(csv)
        for case in cases:
            for jobs in [int(j) for j in args.jobs.split(",") if j]:
                for seed in range(args.repeats):
                    r = run_case(case, csv, Path(tmp) / "store", seed, jobs)
                    print(
                        f"  {case} jobs {jobs} seed {seed}: {r['wall_seconds']:.1f} s", flush=True
                    )
                    runs.append(r)
    summary = summarise(runs)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "repeats": args.repeats}
    payload = {"created": stamp, "machine": meta, "summary": summary, "runs": runs}
    (args.out / f"train_speed-{stamp}.json").write_text(json.dumps(payload, indent=2))
    text = table(summary, args.repeats) + "\n\n" + quality_table(runs)
    (args.out / f"train_speed-{stamp}.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
