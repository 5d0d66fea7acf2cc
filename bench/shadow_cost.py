"""What a staged version costs the served requests (issue 47's cost target).

Trains the simulation bundle (v1, served) and a refit of its gate over the same expert
files (v2), serves v1 with its audit trail, and loads ``/predict`` with wrk in
alternating rounds: nothing staged, then v2 staged (``STAGED`` moved and
``/admin/reload``), the order swapped every round. Reports req/s per round and the
ratio staged / nothing staged: single-row requests at c32 (target >= 0.9) and 1000-row
requests at c4 (target >= 0.85). The machine may be shared, which moves req/s by tens of
per cent between runs: each run also records the CPU time the server spent per request,
and ``cpu_ratio`` (CPU per request with nothing staged over that with v2 staged) is the
req/s ratio a server that has the CPU to itself would show.

    .venv/bin/python bench/shadow_cost.py --rounds 4 --seconds 8
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.loadgen import bodies as B  # noqa: E402
from bench.loadgen.cpu import _procs_s  # noqa: E402
from bench.loadgen.wrk import run_wrk  # noqa: E402
from bench.peers import procs  # noqa: E402
from bench.peers.ours import OursSettings, ours_command  # noqa: E402
from bench.peers.postgres import fresh_schema  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "shadow_cost.json"
TOKEN = "bench-shadow-token"
SHAPES = (("single row, c32", 1, 32, 0.9), ("1000 rows, c4", 1000, 4, 0.85))


def make_versions(store: Path) -> tuple[str, str, bool]:
    """v1 published, v2 (its gate refitted as stacking) beside it; whether they share
    every expert file (then the shadow runs v2's gate alone)."""
    from training.datasets import simulate
    from training.estimator import IABMAClassifier
    from training.experts.defaults import simulation_experts
    from training.export.bundle import export_bundle

    train = simulate(1000, 0)
    est = IABMAClassifier(simulation_experts(), random_state=0).fit(train.X, train.y)
    v1 = export_bundle(est, store, "demo", simulate(300, 10_000).X)
    other = copy.deepcopy(est)
    other.combiner = "stacking"
    Z = other.gate_inputs(other.features(train.X))[other.experts_.evidence_rows_]
    other.fit_gate(Z, other.evidence_)
    v2 = export_bundle(other, store, "demo", simulate(300, 10_000).X, publish=False)
    sums = [
        {e["name"]: e["sha256"] for e in json.loads((p / "manifest.json").read_text())["experts"]}
        for p in (v1, v2)
    ]
    return v1.name, v2.name, sums[0] == sums[1]


def write_bodies(workdir: Path, size: int) -> Path:
    from training.datasets import simulate

    frame = simulate(max(2000, 20 * size), B.SIMULATION_SEED).X
    rows = [{k: float(v) for k, v in r.items()} for r in frame.to_dict(orient="records")]
    count = 2000 if size == 1 else 20
    return B.write_lines(
        workdir / f"native-{size}.txt", [B.native_body(x) for x in B.chunks(rows, size, count)]
    )


def post(port: int, path: str) -> dict[str, Any]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=b"",
        method="POST",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        result: dict[str, Any] = json.loads(r.read())
        return result


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(name))


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (uvicorn's worker)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, grew = {pid}, True
    while grew:
        more = {p for p, pp in parents.items() if pp in found} - found
        found |= more
        grew = bool(more)
    return sorted(found)


def cpu_s(pid: int) -> float:
    """The server's CPU seconds so far. PostgreSQL's are left out: other work on the
    machine uses it too, and the shadow adds one insert per 250 ms to it."""
    return _procs_s(tree(pid))


@contextmanager
def served(store: Path, workdir: Path, audit: str) -> Iterator[tuple[int, int]]:
    with ExitStack() as stack:
        url = (
            stack.enter_context(fresh_schema())
            if audit == "postgres"
            else f"sqlite:///{workdir / 'audit.db'}"
        )
        port = procs.free_port()
        argv, env = ours_command(OursSettings(store, "demo", 1, audit, url), port)
        env.update(IABMA_ADMIN_TOKEN=TOKEN, IABMA_RELOAD_INTERVAL_SECONDS="0")
        log = workdir / "server.log"
        proc, _ = stack.enter_context(procs.server(argv, env, ROOT, log, port, "/readyz"))
        yield port, proc.pid


def run(args: argparse.Namespace) -> dict[str, Any]:
    from app.bundle.staged import stage, unstage

    with tempfile.TemporaryDirectory(prefix="shadow_cost-") as tmp:
        work = Path(tmp)
        store = work / "store"
        v1, v2, shared = make_versions(store)
        files = {size: write_bodies(work, size) for _, size, _, _ in SHAPES}
        out: dict[str, Any] = {"v1": v1, "v2": v2, "gate_only": shared, "shapes": {}}
        with served(store, work, args.audit) as (port, pid):
            for label, size, conns, target in SHAPES:
                rounds = []
                for r in range(args.rounds):
                    got = {}
                    for cond in ("none", "staged") if r % 2 == 0 else ("staged", "none"):
                        if cond == "staged":
                            stage(store, "demo", v2)
                        else:
                            unstage(store, "demo")
                        post(port, "/admin/reload")
                        url = f"http://127.0.0.1:{port}/predict"
                        before = cpu_s(pid)
                        res = run_wrk(url, files[size], conns, args.seconds)
                        got[cond] = res.req_per_s
                        got[f"{cond}_cpu_ms"] = 1e3 * (cpu_s(pid) - before) / max(res.ok, 1)
                        time.sleep(0.5)
                    rounds.append({
                        **got,
                        "ratio": got["staged"] / got["none"],
                        "cpu_ratio": got["none_cpu_ms"] / got["staged_cpu_ms"],
                    })  # fmt: skip
                    print(f"{label} round {r + 1}: {_shown(rounds[-1])}", flush=True)
                out["shapes"][label] = {
                    "rounds": rounds,
                    "median_ratio": statistics.median(x["ratio"] for x in rounds),
                    "median_cpu_ratio": statistics.median(x["cpu_ratio"] for x in rounds),
                    "target": target,
                }
            out["shadowed_requests"] = metric(port, "iabma_shadow_requests_total")
            out["shadow_faults"] = metric(port, "iabma_shadow_faults_total")
    return out


def _shown(r: dict[str, float]) -> str:
    return (
        f"none {r['none']:.0f} req/s ({r['none_cpu_ms']:.3f} ms CPU/req), staged "
        f"{r['staged']:.0f} req/s ({r['staged_cpu_ms']:.3f}), ratio {r['ratio']:.3f}, "
        f"CPU ratio {r['cpu_ratio']:.3f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--audit", choices=("sqlite", "postgres"), default="postgres")
    args = p.parse_args(argv)
    result = run(args)
    result["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    result["command"] = "bench/shadow_cost.py " + " ".join(sys.argv[1:] if argv is None else argv)
    result["note"] = "2 cores shared with other agents' work: compare ratios within rounds"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"gate only: {result['gate_only']}; shadowed requests {result['shadowed_requests']:.0f}, "
          f"faults {result['shadow_faults']:.0f}")  # fmt: skip
    for label, s in result["shapes"].items():
        print(
            f"{label}: median ratio {s['median_ratio']:.3f}, CPU ratio "
            f"{s['median_cpu_ratio']:.3f} (target >= {s['target']})"
        )
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
