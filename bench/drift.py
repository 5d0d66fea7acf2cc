"""The world changes after deployment; outcomes come back; ``iabma refit`` catches up.

The paper's simulation bundle (five experts) is served by our server on a SQLite trail
that keeps inputs in full. Senders (``--senders`` threads) post fresh simulation rows to
``/predict`` concurrently and each answer's outcomes to ``/feedback``, in three phases of
``--requests`` requests of ``--rows`` rows:

1. *before*: the labels are the simulation's own;
2. *after the change*: in the ring region the labels now follow the ``lda`` expert's
   probabilities (the linear region is unchanged);
3. *after the refit*: ``iabma refit --since auto --promote-if-better`` has found the
   change in the realised NLL, refitted the gate on the outcomes after it and promoted it
   (``--known-change``: ``--since`` the true change); the server, following ``LATEST``
   every second, serves the new version without a restart.

Realised NLL is the served mixture's NLL of each request's outcomes, over time. Beside it,
on ``--fresh`` new rows from the changed world: the old gate, the refitted gate, and an
oracle gate fitted (with the same selection and guard) on another ``--fresh`` rows from
the changed world. Target: the refit closes at least 80% of the old gate's NLL gap to the
oracle. Figures go to ``<out>/drift-<UTC>.json`` and ``.md``, the plot to
``--figure`` (``bench/figures/drift.png``), and the terminal.

    .venv/bin/python bench/drift.py                    # ~1 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.peers.procs import free_port_between  # noqa: E402
from bench.speed.trail import serve  # noqa: E402

TRUTH = "lda"  # in the ring region, after the change, the labels follow this expert
# The port range this machine's benchmarks may use.
PORTS = (18100, 18199)
TARGET = 0.8


def found_since(text: str) -> str | None:
    """The change time ``iabma refit --since auto`` printed, if it did."""
    for line in text.splitlines():
        if line.startswith("change point:"):
            return line.rsplit("--since ", 1)[1].strip()
    return None


def world_labels(
    rng: np.random.Generator, y: np.ndarray, region: np.ndarray, truth_p1: np.ndarray
) -> np.ndarray:
    """The changed world: ring rows (region 1) drawn from ``TRUTH``, the rest as before."""
    drawn = (rng.random(len(y)) < truth_p1).astype(int)
    return np.where(region == 1, drawn, y)


def send(base: str, phase: str, requests: int, rows: int, senders: int, seed: int) -> list[dict]:
    """``requests`` predictions of fresh rows and their outcomes, from ``senders`` threads;
    per request its time and realised NLL."""
    from training.datasets import simulate

    def one(k: int, client: httpx.Client) -> dict[str, Any]:
        data = simulate(rows, seed + k)
        body = {"instances": data.X.to_dict(orient="records")}
        rid = f"{phase.replace(' ', '-')}-{k}"
        r = client.post("/predict", json=body, headers={"X-Request-ID": rid})
        if r.status_code != 200:
            raise SystemExit(f"/predict answered {r.status_code}: {r.text[:500]}")
        preds = r.json()["predictions"]
        y = data.y.to_numpy()
        if phase != "before":
            p1 = np.array([p["experts"][TRUTH]["probabilities"]["1"] for p in preds])
            y = world_labels(np.random.default_rng(seed + k), y, data.region, p1)
        p = np.array(
            [p["prediction"]["probabilities"][str(int(v))] for p, v in zip(preds, y, strict=True)]
        )
        outcomes = [{"request_id": rid, "row": i, "outcome": int(v)} for i, v in enumerate(y)]
        client.post("/feedback", json={"outcomes": outcomes}).raise_for_status()
        return {"phase": phase, "t": time.time(), "nll": float(-np.log(p).mean())}

    def worker(ks: range) -> list[dict[str, Any]]:
        with httpx.Client(base_url=base, timeout=60) as client:
            return [one(k, client) for k in ks]

    with ThreadPoolExecutor(senders) as pool:
        parts = pool.map(worker, [range(i, requests, senders) for i in range(senders)])
    return sorted((r for part in parts for r in part), key=lambda r: r["t"])


def serving(base: str, version: str, timeout: float) -> None:
    """Wait until the server answers with ``version``."""
    deadline = time.monotonic() + timeout
    while httpx.get(f"{base}/models", timeout=10).json()["version"] != version:
        if time.monotonic() > deadline:
            raise SystemExit(f"the server did not load {version} within {timeout:.0f} s")
        time.sleep(0.2)


def fresh_world(version_dir: Path, n: int, seed: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """``n`` rows of the changed world: X, labels and the experts' served probabilities."""
    from app.bundle.loader import open_bundle
    from training.datasets import simulate

    data = simulate(n, seed)
    bundle = open_bundle(version_dir)
    feeds = {f.input: data.X[[f.name]].to_numpy(np.float32) for f in bundle.manifest.features}
    (experts,) = bundle.session.run(["expert_probabilities"], feeds)
    j = bundle.manifest.expert_names.index(TRUTH)
    y = world_labels(np.random.default_rng(seed), data.y.to_numpy(), data.region, experts[:, j, 1])
    return data.X, y, np.asarray(experts)


def bundle_nll(version_dir: Path, X: Any, y: np.ndarray) -> float:
    from app.bundle.loader import open_bundle

    bundle = open_bundle(version_dir)
    feeds = {f.input: X[[f.name]].to_numpy(np.float32) for f in bundle.manifest.features}
    (p,) = bundle.session.run(["probabilities"], feeds)
    return float(-np.log(np.clip(p[np.arange(len(y)), y], 1e-300, None)).mean())


def oracle_nll(
    version_dir: Path, fresh: int, X: Any, y: np.ndarray, experts: np.ndarray, seed: int
) -> float:
    """A gate fitted on ``fresh`` rows of the changed world, scored on ``(X, y)`` whose
    experts' probabilities are ``experts``."""
    from app.bundle.mixture import mix_classification
    from training.refit.gate import GateRefit

    X_fit, y_fit, _ = fresh_world(version_dir, fresh, seed)
    oracle = GateRefit(version_dir, holdout=0.05, random_state=seed).fit(X_fit, y_fit)
    cols = oracle.schema_.columns(X)
    w = oracle.combiner_.weights(oracle.encoder_.transform(cols))
    p = mix_classification(w, experts, oracle.temperature_).proba
    return float(-np.log(np.clip(p[np.arange(len(y)), y], 1e-300, None)).mean())


def plot(timeline: list[dict], levels: dict[str, float], refit_s: float, path: Path) -> Path:
    """Realised NLL per request in the order served, the phases coloured; the three
    gates' NLL on fresh rows of the changed world as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    colours = {"before": "tab:blue", "after the change": "tab:red", "after the refit": "tab:green"}
    for phase, colour in colours.items():
        pts = [(k, r["nll"]) for k, r in enumerate(timeline) if r["phase"] == phase]
        ax.plot(*zip(*pts, strict=True), ".", color=colour, label=f"{phase}", alpha=0.7)
    bounds = [
        k for k in range(1, len(timeline)) if timeline[k]["phase"] != timeline[k - 1]["phase"]
    ]
    for k, what in zip(
        bounds, ("the world changes", f"refit ({refit_s:.0f} s), promoted"), strict=True
    ):
        ax.axvline(k - 0.5, color="grey", linestyle=":")
        ax.annotate(what, (k, ax.get_ylim()[1] * 0.95), fontsize=7, color="dimgrey")
    styles = {"old gate": "--", "refitted gate": "-.", "oracle gate": "-"}
    for name, style in styles.items():
        ax.axhline(
            levels[name], color="black", linestyle=style, lw=0.8, label=f"{name} (fresh rows)"
        )
    ax.set_xlabel("requests, in the order served")
    ax.set_ylabel("realised NLL of the request's outcomes")
    ax.set_title("The world changes after deployment; outcomes come back; the gate is refitted")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=40, help="requests per phase")
    p.add_argument("--rows", type=int, default=100, help="rows per request")
    p.add_argument("--senders", type=int, default=4)
    p.add_argument("--fresh", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--known-change",
        action="store_true",
        help="refit with --since at the true change instead of --since auto (the change "
        "point GET /performance suggests)",
    )
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--figure", type=Path, default=REPO / "bench" / "figures" / "drift.png")
    args = p.parse_args()
    iabma = str(Path(sys.executable).parent / "iabma")
    with tempfile.TemporaryDirectory(prefix="drift-") as tmp:
        work, store = Path(tmp), Path(tmp) / "store"
        train = [iabma, "train", "--dataset", "simulation", "--store", str(store)]
        subprocess.run([*train, "--name", "demo", "--quiet"], check=True, stdout=subprocess.DEVNULL)
        old = store / "demo" / (store / "demo" / "LATEST").read_text().strip()
        url = f"sqlite:///{work / 'audit.db'}"
        shape = (args.requests, args.rows, args.senders)
        port = free_port_between(*PORTS)
        # The server follows LATEST every second: the refit's promotion is the rollout.
        with serve(
            store, "demo", url, work, port=port, audit_payload="full", reload_interval_seconds="1"
        ) as base:
            timeline = send(base, "before", *shape, seed=1_000)
            change = time.time()
            timeline += send(base, "after the change", *shape, seed=2_000)
            refit_began = time.time()
            true_since = datetime.fromtimestamp(change, UTC).isoformat()
            since = true_since if args.known_change else "auto"
            cmd = [iabma, "refit", "--store", str(store), "--name", "demo", "--audit-url", url]
            done = subprocess.run(
                [*cmd, "--since", since, "--promote-if-better", "--seed", str(args.seed)],
                check=True, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            print(done.stdout)
            refit_s = time.time() - refit_began
            new = store / "demo" / (store / "demo" / "LATEST").read_text().strip()
            if new != old:
                serving(base, new.name, timeout=60)
            timeline += send(base, "after the refit", *shape, seed=3_000)
        X, y, experts = fresh_world(old, args.fresh, args.seed + 7)
        levels = {
            "old gate": bundle_nll(old, X, y),
            "refitted gate": bundle_nll(new, X, y) if new != old else float("nan"),
            "oracle gate": oracle_nll(old, args.fresh, X, y, experts, args.seed + 11),
        }
    gap = levels["old gate"] - levels["oracle gate"]
    closed = (levels["old gate"] - levels["refitted gate"]) / gap
    realised = {
        phase: float(np.mean([r["nll"] for r in timeline if r["phase"] == phase]))
        for phase in ("before", "after the change", "after the refit")
    }
    figure = plot(timeline, levels, refit_s, args.figure)
    utc = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = {
        "utc": utc,
        "cpus": os.cpu_count(),
        "shape": {"requests": args.requests, "rows": args.rows, "senders": args.senders},
        "realised_nll": realised,
        "fresh_rows": args.fresh,
        "fresh_nll": levels,
        "gap_closed": closed,
        "since": {"true_change": true_since, "given": since, "found": found_since(done.stdout)},
        "target": TARGET,
        "promoted": new != old,
        "refit_wall_s": round(refit_s, 1),
        "figure": str(figure),
    }
    lines = [
        f"# Drift and refit ({utc}; {os.cpu_count()} cores, shared)",
        "",
        "| phase | realised NLL (mean per request) |",
        "|---|---|",
        *(f"| {k} | {v:.4f} |" for k, v in realised.items()),
        "",
        f"| gate, on {args.fresh:,} fresh rows of the changed world | NLL |",
        "|---|---|",
        *(f"| {k} | {v:.4f} |" for k, v in levels.items()),
        "",
        f"gap to the oracle closed by the refit: {closed:.1%} (target ≥ {TARGET:.0%}: "
        f"{'met' if closed >= TARGET else 'NOT met'}); plot: {result['figure']}",
        f"refit --since {since}: the true change at {true_since}, the refit's start at "
        f"{result['since']['found'] or true_since}",
    ]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"drift-{utc.replace(':', '')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
    stem.with_suffix(".md").write_text(text)
    print(text)
    return 0 if closed >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
