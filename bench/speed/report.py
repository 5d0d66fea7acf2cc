"""Ratios between runs of one benchmark, and the markdown tables printed and saved."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.peers.ours import NO_CHAIN

NOISY_PCT = 15.0  # other processes took this share of the machine: the figure is suspect

# name -> (numerator, denominator, what); a key is (kind, workers, audit, route, rows, conns)
Key = tuple[str, int, str, str, int, int]
OURS_C32 = ("ours", 1, "sqlite", "predict", 1, 32)
OURS_GRPC_C32 = ("ours", 1, "sqlite", "grpc", 1, 32)
CEILING_GRPC_C32 = ("ceiling", 1, "-", "grpc", 1, 32)
RATIOS: dict[str, tuple[Key, Key, str]] = {
    "ours_over_bare_c32": (
        OURS_C32,
        ("bare", 1, "-", "predict", 1, 32),
        "req/s, single-row /predict c32, ours 1 worker SQLite trail vs the bare peer",
    ),
    "baseline_over_bare_c32": (
        ("baseline", 1, "sqlite", "predict", 1, 32),
        ("bare", 1, "-", "predict", 1, 32),
        "req/s, single-row /predict c32: the --baseline checkout's server vs the bare peer",
    ),
    "ours_over_baseline_c32": (
        OURS_C32,
        ("baseline", 1, "sqlite", "predict", 1, 32),
        "req/s, single-row /predict c32: this checkout's server vs the --baseline checkout's",
    ),
    "ours_nochain_over_bare_c32": (
        ("ours", 1, NO_CHAIN, "predict", 1, 32),
        ("bare", 1, "-", "predict", 1, 32),
        "req/s, single-row /predict c32: ours 1 worker SQLite trail without its chain "
        "(IABMA_AUDIT_CHAIN=false, benchmarks only) vs the bare peer",
    ),
    "chain_on_over_off_c32": (
        OURS_C32,
        ("ours", 1, NO_CHAIN, "predict", 1, 32),
        "req/s, single-row c32, 1 worker SQLite trail: with the chain vs without; "
        "ours_over_bare_c32 / ours_nochain_over_bare_c32, target >= 0.95",
    ),
    "ours_off_over_bare_c32": (
        ("ours", 1, "off", "predict", 1, 32),
        ("bare", 1, "-", "predict", 1, 32),
        "req/s, single-row /predict c32: ours 1 worker with the trail off vs the bare peer; "
        "target >= 1.05",
    ),
    "audit_sqlite_over_off_c32": (
        OURS_C32,
        ("ours", 1, "off", "predict", 1, 32),
        "req/s, single-row c32, 1 worker: SQLite trail on vs off",
    ),
    "audit_postgres_over_off_c32": (
        ("ours", 1, "postgres", "predict", 1, 32),
        ("ours", 1, "off", "predict", 1, 32),
        "req/s, single-row c32, 1 worker: PostgreSQL trail on vs off",
    ),
    "workers_2_over_1_postgres_c32": (
        ("ours", 2, "postgres", "predict", 1, 32),
        ("ours", 1, "postgres", "predict", 1, 32),
        "req/s, single-row c32, PostgreSQL trail: 2 workers vs 1",
    ),
    "bare_workers_2_over_1_c32": (
        ("bare", 2, "-", "predict", 1, 32),
        ("bare", 1, "-", "predict", 1, 32),
        "req/s, single-row c32, the bare peer: 2 workers vs 1 (what 2 cores give at best)",
    ),
    "ours_oip_over_mlserver_c32": (
        ("ours", 1, "sqlite", "oip", 1, 32),
        ("mlserver", 1, "-", "oip", 1, 32),
        "req/s, single-row OIP infer c32: ours (5 experts + gate, SQLite trail) vs MLServer",
    ),
    "ceiling_over_mlserver_c32": (
        ("ceiling", 1, "-", "predict", 1, 32),
        ("mlserver", 1, "-", "oip", 1, 32),
        "req/s c32: an empty ASGI app (no work at all) vs MLServer's single-row OIP infer; "
        "the most that ours_oip_over_mlserver_c32 could reach on this machine",
    ),
    "ceiling_grpc_over_predict_c32": (
        CEILING_GRPC_C32,
        OURS_C32,
        "req/s c32: a trivial grpc.aio ModelInfer handler vs our /predict; the most that "
        "grpc_over_predict_c32 could reach",
    ),
    "grpc_over_ceiling_grpc_c32": (
        OURS_GRPC_C32,
        CEILING_GRPC_C32,
        "req/s c32: our gRPC ModelInfer vs the trivial handler on the same stack",
    ),
    "grpc_over_predict_c32": (
        OURS_GRPC_C32,
        OURS_C32,
        "req/s, single-row c32, 1 worker SQLite trail: OIP ModelInfer over gRPC (h2load) vs "
        "/predict (wrk); target >= 0.7",
    ),
    "oip_binary_over_json_1000_c8": (
        ("ours", 1, "sqlite", "oip_binary", 1000, 8),
        ("ours", 1, "sqlite", "oip", 1000, 8),
        "rows/s, 1000-row OIP infer c8, 1 worker SQLite trail: binary tensors in and out vs "
        "JSON; target >= 2.0",
    ),
    "ours_predict_over_mlserver_c32": (
        OURS_C32,
        ("mlserver", 1, "-", "oip", 1, 32),
        "req/s, single-row c32: our /predict (SQLite trail) vs MLServer OIP infer",
    ),
}

# 1000-row /predict, ours (SQLite trail) against the bare one-expert peer (--batch).
for _c in (1, 8):
    RATIOS[f"rows1000_prediction_over_bare_c{_c}"] = (
        ("ours", 1, "sqlite", "predict_prediction", 1000, _c),
        ("bare", 1, "-", "predict", 1000, _c),
        f'rows/s, 1000-row /predict c{_c}: ours with include ["prediction"], SQLite trail, '
        "vs the bare peer's labels and probabilities; target >= 0.8",
    )
    RATIOS[f"rows1000_default_over_bare_c{_c}"] = (
        ("ours", 1, "sqlite", "predict", 1000, _c),
        ("bare", 1, "-", "predict", 1000, _c),
        f"rows/s, 1000-row /predict c{_c}: ours with the default answer, SQLite trail, vs the "
        "bare peer",
    )


def _medians(runs: Sequence[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """Per key, the run with the median req/s (the lower middle of an even count): a key
    measured in several rounds (``--ratio``) is judged by its median."""
    grouped: dict[Key, list[dict[str, Any]]] = {}
    for r in runs:
        grouped.setdefault(run_key(r), []).append(r)
    out = {}
    for key, group in grouped.items():
        ordered = sorted(group, key=lambda r: r["req_per_s"])
        out[key] = ordered[(len(ordered) - 1) // 2]
    return out


def run_key(run: dict[str, Any]) -> Key:
    return (
        run["server"],
        run["workers"],
        run["audit"],
        run["route"],
        run["rows"],
        run["connections"],
    )


_SERVERS_1000 = {
    ("ours", "sqlite"): "1 worker, SQLite trail",
    ("ours", "off"): "1 worker, trail off",
    ("baseline", "sqlite"): "the --baseline checkout, 1 worker, SQLite trail",
}


def compute_ratios(
    runs: Sequence[dict[str, Any]], floors: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for bundle in dict.fromkeys(r["bundle"] for r in runs):
        by_key = _medians([r for r in runs if r["bundle"] == bundle and r["ok"] > 0])
        ratios: dict[str, Any] = {}
        for name, (num, den, what) in RATIOS.items():
            a, b = by_key.get(num), by_key.get(den)
            value = round(a["req_per_s"] / b["req_per_s"], 3) if a and b else None
            ratios[name] = {"value": value, "what": what}
        ratios.update(_scaling_bound(by_key))
        floor = floors.get(bundle, {}).get("1000")
        for server, audit, route, name, answer in (
            ("ours", "sqlite", "predict", "http_1000_over_floor", "rows"),
            ("ours", "sqlite", "columnar", "http_1000_columnar_over_floor", "columnar"),
            ("ours", "off", "predict", "http_1000_trail_off_over_floor", "rows"),
            ("baseline", "sqlite", "predict", "http_1000_baseline_over_floor", "rows"),
        ):
            big = by_key.get((server, 1, audit, route, 1000, 1))
            if big is None and (server, audit) != ("ours", "sqlite"):
                continue  # measured only in some modes: no empty row for it
            label = _SERVERS_1000[server, audit]
            for suffix, den, how in (
                ("", "predict_ms", "in-process predict median"),
                ("_after_idle", "predict_after_idle_ms", "the same predict after 1 ms asleep"),
            ):
                value = None
                if big and floor:
                    value = round(big["latency_ms"]["p50"] / floor[den], 2)
                ratios[name + suffix] = {
                    "value": value,
                    "what": f"1000-row /predict, {answer} answer, at c1 ({label}): "
                    f"HTTP p50 / {how}",
                }
        out[bundle] = ratios
    return out


def _cpu_us(run: dict[str, Any], cpus: int) -> float:
    """The machine's CPU time per request in a run, in µs: server, wrk and the rest (on a
    PostgreSQL trail, mostly PostgreSQL)."""
    cpu = run["cpu"]
    busy = (cpu["server_pct"] + cpu["wrk_pct"] + cpu["other_pct"]) / 100
    return busy * cpus * 1e6 / run["req_per_s"]


def _scaling_bound(by_key: dict[Key, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What two workers on a PostgreSQL trail could reach at most on this machine: its
    cores over the CPU time a request took with one worker (a request costs no less with
    two: each writer's groups are smaller)."""
    one = by_key.get(("ours", 1, "postgres", "predict", 1, 32))
    two = by_key.get(("ours", 2, "postgres", "predict", 1, 32))
    if not one or "cpus" not in one:
        return {}
    us1 = _cpu_us(one, one["cpus"])
    out = {
        "workers_2_over_1_postgres_c32_bound": {
            "value": round(one["cpus"] * 1e6 / us1 / one["req_per_s"], 3),
            "what": f"the most workers_2_over_1_postgres_c32 can reach here: {one['cpus']} "
            f"cores / {us1:.0f} µs of CPU a request with one worker (server, wrk, "
            "PostgreSQL), over one worker's req/s",
        }
    }
    if two:
        out["cpu_us_per_request_postgres_2_over_1"] = {
            "value": round(_cpu_us(two, two["cpus"]) / us1, 3),
            "what": f"CPU a request, 2 workers vs 1, PostgreSQL trail: "
            f"{_cpu_us(two, two['cpus']):.0f} against {us1:.0f} µs",
        }
    return out


def _fmt(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        f"## serve_speed {result['started_utc']} ({result['mode']}, {result['duration_s']} s "
        f"per run after {result['warmup_s']} s warm-up; wrk on the same {result['machine']['cpus']}"
        " cores)",
        "",
        f"machine: {m['platform']}, Python {m['python']}, onnxruntime {m['onnxruntime']}; "
        f"1M-step Python loop {m['python_loop_ms_before']} ms before, "
        f"{m.get('python_loop_ms_after', '-')} ms after; load average "
        f"{m['loadavg_1m_before']} before, {m.get('loadavg_1m_after', '-')} after",
        "",
        "| bundle | server | workers | audit | route | rows/req | conns | req/s | rows/s "
        "| p50 ms | p90 ms | p99 ms | failed | other CPU % |",
        "|---|---|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in result["runs"]:
        lat = r["latency_ms"]
        other = r["cpu"]["other_pct"]
        other_text = f"{other:.0f}" + (" !" if other > NOISY_PCT else "")
        lines.append(
            f"| {r['bundle']} | {r['server']} | {r['workers']} | {r['audit']} | {r['route']} "
            f"| {r['rows']} | {r['connections']} | {_fmt(r['req_per_s'])} "
            f"| {_fmt(r['rows_per_s'])} | {lat['p50']:.2f} | {lat['p90']:.2f} "
            f"| {lat['p99']:.2f} | {r['failures']} | {other_text} |"
        )
    grpc = [r for r in result["runs"] if r["route"] == "grpc"]
    if grpc:
        means = ", ".join(
            f"{r['bundle']} c{r['connections']} {r['latency_ms']['mean']:.2f}" for r in grpc
        )
        lines += [
            "",
            f"gRPC runs are loaded by h2load, which gives no percentiles (nan): mean ms {means}.",
        ]
    if any(r["cpu"]["other_pct"] > NOISY_PCT for r in result["runs"]):
        lines += [
            "",
            f"! other processes used over {NOISY_PCT:g}% of the machine during the run: "
            "its figure is low by roughly that share; rerun it on a quiet machine.",
        ]
    lines += [
        "",
        "| server | cold start s | RSS MB per worker (after warm-up, at end) | serves |",
        "|---|--:|---|---|",
    ]
    for s in result["servers"]:
        rss = s.get("rss_mb") or {}
        rss_text = f"{_fmt(rss.get('worker'), 1)}, {_fmt(rss.get('worker_end'), 1)}"
        if s.get("error"):
            rss_text = f"FAILED: {s['error'].splitlines()[0][:80]}"
        lines.append(
            f"| {s['label']} | {_fmt(s.get('cold_start_s'), 2)} | {rss_text} | {s['serves']} |"
        )
    lines += ["", "| bundle | in-process floor | 1 row ms | 1000 rows ms |", "|---|---|--:|--:|"]
    for bundle, f in result["floor"].items():
        if "error" in f:
            lines.append(f"| {bundle} | FAILED: {f['error'][:80]} | - | - |")
            continue
        for what in ("predict_ms", "predict_after_idle_ms", "columns_ms"):
            lines.append(
                f"| {bundle} | {what.removesuffix('_ms')} | {f['1'][what]:.3f} "
                f"| {f['1000'][what]:.3f} |"
            )
    lines += ["", "| bundle | ratio | value | what |", "|---|---|--:|---|"]
    for bundle, ratios in result["ratios"].items():
        for name, r in ratios.items():
            lines.append(f"| {bundle} | {name} | {_fmt(r['value'], 2)} | {r['what']} |")
    if result["skipped"]:
        lines += ["", "Skipped:"]
        lines += [f"- {s['what']}: {s['reason'].splitlines()[0][:200]}" for s in result["skipped"]]
    if result["failed_runs"]:
        lines += ["", "Runs with failures (non-2xx, socket errors, or no successful request):"]
        lines += [f"- {label}" for label in result["failed_runs"]]
    return "\n".join(lines) + "\n"


def write_results(out: Path, stem: str, report: dict[str, Any], text: str) -> Path:
    """``<out>/<stem>.json`` (the report) and ``.md`` (its tables), echoed to the terminal."""
    out.mkdir(parents=True, exist_ok=True)
    base = out / stem
    base.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    base.with_suffix(".md").write_text(text, encoding="utf-8")
    print("\n" + text + f"\nwrote {base}.json and .md", flush=True)
    return base
