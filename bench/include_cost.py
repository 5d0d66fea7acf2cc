"""What each ``include`` part and ``format: columnar`` cost a batch client: 1000-row
``/predict`` at one connection, our server with its SQLite trail, every variant of the body
in turn, ``--rounds`` times (medians of the rounds' p50s and rows/s), with each answer's
size. docs/clients.md shows the table.

    .venv/bin/python bench/include_cost.py --bundle demo --rounds 3 --duration 4

Results go to ``bench/results/include_cost-<UTC>.json`` and ``.md``, the table to the
terminal. The machine may be shared: the rounds alternate the variants, read ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.loadgen import bodies as B  # noqa: E402
from bench.loadgen.wrk import run_wrk  # noqa: E402
from bench.peers import procs  # noqa: E402
from bench.peers.ours import READY_PATH, OursSettings, ours_command  # noqa: E402
from bench.speed.bundles import N_BIG, ensure_bundle  # noqa: E402
from bench.speed.plan import BIG  # noqa: E402

VARIANTS: dict[str, dict[str, Any]] = {
    "prediction": {"include": ["prediction"]},
    "prediction, weights": {"include": ["prediction", "weights"]},
    "prediction, uncertainty": {"include": ["prediction", "uncertainty"]},
    "prediction, experts": {"include": ["prediction", "experts"]},
    "default (all four parts)": {},
    "columnar, prediction": {"include": ["prediction"], "format": "columnar"},
    "columnar, default": {"format": "columnar"},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", type=Path, default=REPO / "models_store")
    p.add_argument("--bundle", default="demo")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=4.0, help="seconds per run")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    return p.parse_args(argv)


def write_bodies(version_dir: Path, bundle: str, tmp: Path) -> dict[str, Path]:
    manifest = json.loads((version_dir / "manifest.json").read_text())
    frame, _ = B.dataset_frame(bundle, N_BIG * BIG)
    batches = B.chunks(B.json_rows(frame, B.features_of(manifest)), BIG, N_BIG)
    out = {}
    for k, (name, extra) in enumerate(VARIANTS.items()):
        lines = [json.dumps({"instances": x, **extra}, separators=(",", ":")) for x in batches]
        out[name] = B.write_lines(tmp / f"variant-{k}.txt", lines)
    return out


def answer_bytes(url: str, body_file: Path) -> int:
    body = body_file.read_text().splitlines()[0].encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return len(r.read())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    procs.install_cleanup()
    version_dir = ensure_bundle(args.store.resolve(), args.bundle)
    seen: dict[str, list[tuple[float, float]]] = {k: [] for k in VARIANTS}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="include-cost-") as tmp_text:
        tmp = Path(tmp_text)
        files = write_bodies(version_dir, args.bundle, tmp)
        port = procs.free_port()
        settings = OursSettings(
            args.store.resolve(), args.bundle, 1, "sqlite", f"sqlite:///{tmp / 'trail.db'}"
        )
        argv_, env = ours_command(settings, port)
        url = f"http://127.0.0.1:{port}/predict"
        with procs.server(argv_, env, REPO, tmp / "server.log", port, READY_PATH):
            for name, f in files.items():
                sizes[name] = answer_bytes(url, f)
                run_wrk(url, f, 1, 1)  # warm
            for _ in range(args.rounds):
                for name, f in files.items():
                    r = run_wrk(url, f, 1, args.duration)
                    seen[name].append((r.latency_ms["p50"], r.req_per_s * BIG))
    rows = {
        k: (statistics.median(p for p, _ in v), statistics.median(r for _, r in v))
        for k, v in seen.items()
    }
    base = rows["prediction"][0]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    lines = [
        f"## include_cost {stamp}: {args.bundle}, {BIG} rows a request, c1, SQLite trail, "
        f"median of {args.rounds} alternating rounds of {args.duration:g} s (shared machine)",
        "",
        "| body | p50 ms | × prediction alone | rows/s | answer bytes a row |",
        "|---|--:|--:|--:|--:|",
        *(
            f"| {k} | {p:.2f} | {p / base:.2f} | {r:,.0f} | {sizes[k] / BIG:.0f} |"
            for k, (p, r) in rows.items()
        ),
    ]
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"include_cost-{stamp}.md").write_text(text + "\n")
    given = {k: str(v) for k, v in vars(args).items()}
    payload = {"rounds": seen, "answer_bytes": sizes, "args": given}
    (args.out / f"include_cost-{stamp}.json").write_text(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
