"""What a large request costs, part by part, in process: parse, validate, graph, encode
the answer, build the record (its packed arrays, its input's canonical JSON and HMAC),
chain and commit (SQLite, one record a transaction).

Each part runs alone with the server's own functions on the bundle's rows, ``--repeats``
times in alternating rounds of every part; medians. The machine may be shared: read
the parts against one another, and against the graph.

    .venv/bin/python bench/record_cost.py --bundle demo --rows 1000
    .venv/bin/python bench/record_cost.py --include prediction

Results go to ``bench/results/record_cost-<UTC>.json`` and ``.md``, the table to the
terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import orjson  # noqa: E402

from app.audit.store.chain import chain_key, row_digest  # noqa: E402
from app.audit.write.trail_db import AuditStore  # noqa: E402
from app.codecs import native  # noqa: E402
from app.core.context import RequestContext, new_request_id  # noqa: E402
from app.core.plane import InferenceResult  # noqa: E402
from app.core.runtime import ModelRuntime  # noqa: E402
from app.core.trail import make_record  # noqa: E402
from app.settings import Settings  # noqa: E402
from bench.loadgen import bodies as B  # noqa: E402
from bench.speed.bundles import ensure_bundle  # noqa: E402

KEY = b"k" * 32


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", type=Path, default=REPO / "models_store")
    p.add_argument("--bundle", default="demo")
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--include", nargs="*", default=None, help="parts (default: all)")
    p.add_argument("--repeats", type=int, default=25)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    return p.parse_args(argv)


def parts(args: argparse.Namespace, db: Path) -> dict[str, Callable[[], Any]]:
    """Each part of a request, as a call that repeats it."""
    version_dir = ensure_bundle(args.store, args.bundle)
    settings = Settings(store=args.store, model_name=args.bundle)
    model = asyncio.run(ModelRuntime(settings).load())
    manifest = json.loads((version_dir / "manifest.json").read_text())
    frame, _ = B.dataset_frame(args.bundle, args.rows)
    rows = B.json_rows(frame, B.features_of(manifest))[: args.rows]
    body: dict[str, Any] = {"instances": rows}
    if args.include:
        body["include"] = args.include
    raw = orjson.dumps(body)
    request, opts = native.decode(orjson.loads(raw), model, 10_000)
    result = InferenceResult(model, model.predictor.predict(request.columns))
    ctx = RequestContext(new_request_id(), time.perf_counter())
    record = make_record(result, request, ctx, "hash", KEY)
    row = record.log_values()
    store = AuditStore(f"sqlite:///{db}", 10.0, chain_key(KEY))
    store.prepare()
    plain = AuditStore(f"sqlite:///{db.with_suffix('.plain.db')}", 10.0, None)
    plain.prepare()

    def fresh(values: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return [(bytes.fromhex(new_request_id()), *values[1:])]

    return {
        "parse (orjson)": lambda: orjson.loads(raw),
        "validate (decode to columns)": lambda: native.decode(orjson.loads(raw), model, 10_000),
        "graph (in process)": lambda: model.predictor.predict(request.columns),
        "encode the answer": lambda: native.encode(result, opts, ctx.request_id),
        "record: its arrays packed": record.answer,
        "record: the input's canonical JSON + HMAC": lambda: record.row(b"", 0),
        "record: the whole row": lambda: make_record(
            result, request, ctx, "hash", KEY
        ).log_values(),
        "chain: the row's digest": lambda: row_digest(row),
        "commit, chained (SQLite)": lambda: store.insert_rows(fresh(row)),
        "commit, no chain (SQLite)": lambda: plain.insert_rows(fresh(row)),
        "_answer_bytes": lambda: len(native.encode(result, opts, ctx.request_id)),
        "_record_bytes": lambda: len(row[-1]),
    }


def measure(calls: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median ms of each part, in rounds that run every part once."""
    timed = {k: v for k, v in calls.items() if not k.startswith("_")}
    for call in timed.values():
        call()  # warm
    seen: dict[str, list[float]] = {k: [] for k in timed}
    for _ in range(repeats):
        for name, call in timed.items():
            t0 = time.perf_counter()
            call()
            seen[name].append((time.perf_counter() - t0) * 1000)
    return {k: statistics.median(v) for k, v in seen.items()}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        calls = parts(args, Path(tmp) / "trail.db")
        medians = measure(calls, args.repeats)
        sizes = {"answer_bytes": calls["_answer_bytes"](), "record_blob": calls["_record_bytes"]()}
    graph = medians["graph (in process)"]
    include = " ".join(args.include) if args.include else "default"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    lines = [
        f"## record_cost {stamp}: {args.bundle}, {args.rows} rows, include {include}, "
        f"median of {args.repeats} (shared machine)",
        "",
        "| part | ms | × graph |",
        "|---|--:|--:|",
        *(f"| {k} | {v:.3f} | {v / graph:.2f} |" for k, v in medians.items()),
        "",
        f"answer {sizes['answer_bytes']:,} bytes ({sizes['answer_bytes'] / args.rows:.0f} a "
        f"row); the record's packed arrays {sizes['record_blob']:,} bytes",
    ]
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"record_cost-{stamp}.md").write_text(text + "\n")
    payload = {"args": {k: str(v) for k, v in vars(args).items()}, "ms": medians, **sizes}
    (args.out / f"record_cost-{stamp}.json").write_text(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
