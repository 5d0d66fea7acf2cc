"""The audit trail's group wait (``IABMA_AUDIT_GROUP_WAIT_MS``) measured on and off, side by side.

Our server serves the demo bundle's single rows under wrk, with its trail on PostgreSQL (one
and two workers) and on SQLite (one worker), once per group wait. Each round starts every
configuration afresh in turn, so slow spells of the machine fall on all of them alike; the
tables give medians over the rounds. Per run it records req/s and latency, the records per
group commit (from the server's own metrics), and the CPU that PostgreSQL spent per request.

    .venv/bin/python bench/audit_group.py                 # 5 rounds, ~12 min
    .venv/bin/python bench/audit_group.py --waits 0,2,4,8 --rounds 3
    .venv/bin/python bench/audit_group.py --quick         # every path once, ~1 min

Results go to ``<out>/audit_group-<UTC>.json`` and ``.md``, and the table to the terminal.
"""

from __future__ import annotations

import argparse
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

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.loadgen.cpu import CPUS, _machine_busy_s, named_s  # noqa: E402
from bench.loadgen.wrk import run_wrk, wrk_binary  # noqa: E402
from bench.peers import procs  # noqa: E402
from bench.peers.ours import READY_PATH, OursSettings, ours_command  # noqa: E402
from bench.peers.postgres import fresh_schema  # noqa: E402
from bench.speed.bundles import prepare_bundle  # noqa: E402
from bench.speed.report import write_results  # noqa: E402

# (trail, workers): SQLite serves one process, so it runs with one worker only.
TRAILS = (("postgres", 1), ("postgres", 2), ("sqlite", 1))
KEY = ("trail", "workers", "connections", "wait_ms")  # what one configuration is
COMMITS = "iabma_audit_commit_duration_seconds_count"
RECORDS = "iabma_audit_records_total"


def metric(port: int, name: str) -> float:
    """The sum of a metric's samples over every worker, from ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(name + "{"))


@contextmanager
def serve(store: Path, trail: str, workers: int, wait_ms: float, workdir: Path) -> Iterator[int]:
    """Start our server with this trail and group wait; yield its port."""
    with ExitStack() as stack:
        port = procs.free_port()
        if trail == "postgres":
            url = stack.enter_context(fresh_schema())
        else:
            url = f"sqlite:///{workdir / f'audit-{port}.db'}"
        settings = OursSettings(store, "demo", workers, trail, url, group_wait_ms=wait_ms)
        argv, env = ours_command(settings, port)
        log = workdir / f"ours-{trail}-{workers}w-{wait_ms:g}ms-{port}.log"
        stack.enter_context(procs.server(argv, env, REPO, log, port, READY_PATH))
        yield port


def one_load(port: int, body: Path, connections: int, seconds: float) -> dict[str, Any]:
    """One wrk run, with the commits it caused and the CPU it cost the machine and PostgreSQL."""
    url = f"http://127.0.0.1:{port}/predict"
    commits, records = metric(port, COMMITS), metric(port, RECORDS)
    busy, pg, t0 = _machine_busy_s(), named_s("postgres"), time.monotonic()
    res = run_wrk(url, body, connections, seconds)
    elapsed = time.monotonic() - t0
    busy, pg = _machine_busy_s() - busy, named_s("postgres") - pg
    commits, records = metric(port, COMMITS) - commits, metric(port, RECORDS) - records
    ok = max(1, res.ok)
    return {
        "req_per_s": round(res.req_per_s, 1),
        "p50_ms": res.latency_ms.get("p50"),
        "p99_ms": res.latency_ms.get("p99"),
        "failures": res.failures,
        "ok": res.ok,
        "records_per_commit": round(records / commits, 2) if commits else None,
        "postgres_cpu_us_per_request": round(1e6 * pg / ok, 1),
        "machine_busy_pct": round(100 * busy / (elapsed * CPUS), 1),
    }


def run_rounds(args: argparse.Namespace, store: Path, body: Path, workdir: Path) -> list[dict]:
    runs: list[dict[str, Any]] = []
    configs = [(t, w, wait) for t, w in TRAILS for wait in args.wait_list]
    total, t0 = args.rounds * len(configs) * len(args.conn_list), time.monotonic()
    for rnd in range(args.rounds):
        for trail, workers, wait in configs:
            with serve(store, trail, workers, wait, workdir) as port:
                for conns in args.conn_list:
                    if args.warmup:
                        run_wrk(f"http://127.0.0.1:{port}/predict", body, conns, args.warmup)
                    r = one_load(port, body, conns, args.duration)
                    r.update(round=rnd, trail=trail, workers=workers, wait_ms=wait)
                    r.update(connections=conns)
                    runs.append(r)
                    done = len(runs)
                    left = (time.monotonic() - t0) / done * (total - done)
                    print(
                        f"[{done}/{total}, ~{left / 60:.1f} min left] round {rnd + 1} {trail} "
                        f"{workers}w wait {wait:g} ms c{conns}: {r['req_per_s']:,.0f} req/s, "
                        f"p99 {r['p99_ms']} ms, {r['records_per_commit']} records/commit, "
                        f"PostgreSQL {r['postgres_cpu_us_per_request']} us/req",
                        flush=True,
                    )
    return runs


def key(r: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(r[k] for k in KEY)


def medians(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for k in sorted({key(r) for r in runs}):
        group = [r for r in runs if key(r) == k]
        row: dict[str, Any] = dict(zip(KEY, k, strict=True))
        for field in ("req_per_s", "p50_ms", "p99_ms", "records_per_commit",
                      "postgres_cpu_us_per_request", "machine_busy_pct"):  # fmt: skip
            values = [r[field] for r in group if r[field] is not None]
            row[field] = round(statistics.median(values), 2) if values else None
        row["rounds"] = len(group)
        out.append(row)
    return out


def ratios(table: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per wait: two PostgreSQL workers over one, and each wait's req/s over no wait."""
    rps = {key(m): m["req_per_s"] for m in table}
    out = []
    for (trail, workers, conns, wait), value in sorted(rps.items()):
        base = rps.get((trail, workers, conns, 0.0))
        one = rps.get((trail, 1, conns, wait)) if workers == 2 else None
        out.append({
            "trail": trail, "workers": workers, "connections": conns, "wait_ms": wait,
            "over_no_wait": round(value / base, 3) if base else None,
            "two_workers_over_one": round(value / one, 3) if one else None,
        })  # fmt: skip
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# audit_group {report['started_utc']} ({report['rounds']} rounds of "
        f"{report['duration_s']:g} s, medians)",
        "",
        "| trail | workers | conns | wait ms | req/s | p50 ms | p99 ms | records/commit "
        "| PostgreSQL µs/req | machine busy % | x no wait | 2w / 1w |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    extra = {key(r): r for r in report["ratios"]}
    for m in report["medians"]:
        x = extra[key(m)]
        cells = [m["trail"], m["workers"], m["connections"], f"{m['wait_ms']:g}",
                 f"{m['req_per_s']:,.0f}", m["p50_ms"], m["p99_ms"], m["records_per_commit"],
                 m["postgres_cpu_us_per_request"], m["machine_busy_pct"],
                 x["over_no_wait"] or "-", x["two_workers_over_one"] or "-"]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", type=Path, default=REPO / "models_store", help="bundle store")
    p.add_argument("--waits", default="0,4", help="group waits in ms, comma list (0 is needed)")
    p.add_argument("--connections", default="1,8,32", help="wrk connections, comma list")
    p.add_argument("--rounds", type=int, default=None, help="rounds (5; quick 1)")
    p.add_argument("--duration", type=float, default=None, help="seconds per load (6; quick 1)")
    p.add_argument("--warmup", type=float, default=None, help="wrk warm-up per load (2; quick 0)")
    p.add_argument("--quick", action="store_true", help="every path once, ~1 min")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    try:
        args.wait_list = sorted({float(x) for x in args.waits.split(",") if x.strip()} | {0.0})
        args.conn_list = [int(x) for x in args.connections.split(",") if x.strip()]
    except ValueError as exc:
        p.error(f"--waits and --connections take comma lists of numbers ({exc})")
    if args.quick:
        args.conn_list = [8]
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.duration = args.duration or (1.0 if args.quick else 6.0)
    args.warmup = args.warmup if args.warmup is not None else (0.0 if args.quick else 2.0)
    if args.duration < 1 or args.rounds < 1 or not args.conn_list:
        p.error("--duration and --rounds are at least 1, and --connections names one level")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    procs.install_cleanup()
    wrk_binary()
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    store = args.store.resolve()
    with tempfile.TemporaryDirectory(prefix="audit-group-") as tmp:
        workdir = Path(tmp)
        ctx, _ = prepare_bundle(store, "demo", workdir)
        runs = run_rounds(args, store, ctx.bodies["native", 1], workdir)
    table = medians(runs)
    report = {
        "benchmark": "audit_group",
        "started_utc": started,
        "rounds": args.rounds,
        "duration_s": args.duration,
        "waits_ms": args.wait_list,
        "runs": runs,
        "medians": table,
        "ratios": ratios(table),
    }
    write_results(args.out, f"audit_group-{started}", report, markdown(report))
    failed = [r for r in runs if r["failures"] or not r["ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
