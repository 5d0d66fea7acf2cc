"""The serve_speed plan and its ratios: the chain's cost is measured in the same run."""

from __future__ import annotations

from typing import Any

from bench.peers.ours import NO_CHAIN, OursSettings, ours_command
from bench.speed.plan import build_plan
from bench.speed.report import compute_ratios


def test_chain_cost_takes_a_turn_in_every_ratio_round() -> None:
    plan = build_plan(["demo"], "ratio", rounds=3, chain_cost=True)
    labels = [g.server.label for g in plan]
    assert labels.count("demo ours 1w sqlite-nochain") == 3
    assert labels.count("demo ours 1w sqlite") == 3 and labels.count("demo bare 1w") == 3
    assert "demo ours 1w sqlite-nochain" not in {
        g.server.label for g in build_plan(["demo"], "ratio", rounds=3)
    }
    default = {g.server.label for g in build_plan(["demo"], "default")}
    assert "demo ours 1w sqlite-nochain" in default


def test_only_the_nochain_server_runs_without_the_chain(tmp_path: Any) -> None:
    def env(audit: str) -> dict[str, str]:
        return ours_command(OursSettings(tmp_path, "demo", 1, audit, "sqlite:///x.db"), 1)[1]

    assert env(NO_CHAIN)["IABMA_AUDIT_CHAIN"] == "false"
    assert env(NO_CHAIN)["IABMA_AUDIT_ENABLED"] == "true"
    assert "IABMA_AUDIT_CHAIN" not in env("sqlite")


def _run(server: str, audit: str, req_per_s: float) -> dict[str, Any]:
    return {
        "bundle": "demo",
        "server": server,
        "workers": 1,
        "audit": audit,
        "route": "predict",
        "rows": 1,
        "connections": 32,
        "req_per_s": req_per_s,
        "ok": 1,
    }


def test_the_chain_ratio_is_between_the_two_servers_medians() -> None:
    runs = [
        *(_run("ours", "sqlite", r) for r in (900.0, 1000.0, 950.0)),
        *(_run("ours", NO_CHAIN, r) for r in (1000.0, 980.0, 1200.0)),
        *(_run("bare", "-", r) for r in (1100.0, 1250.0, 1300.0)),
    ]
    ratios = compute_ratios(runs, {})["demo"]
    assert ratios["chain_on_over_off_c32"]["value"] == round(950 / 1000, 3)
    assert ratios["ours_over_bare_c32"]["value"] == round(950 / 1250, 3)
    assert ratios["ours_nochain_over_bare_c32"]["value"] == round(1000 / 1250, 3)


def test_scaling_alternates_one_and_two_workers_and_bounds_the_ratio() -> None:
    plan = build_plan(["demo"], "scaling", rounds=2)
    labels = [g.server.label for g in plan]
    assert labels == [
        "demo ours 1w postgres", "demo ours 2w postgres", "demo bare 1w", "demo bare 2w"
    ] * 2  # fmt: skip

    def run(workers: int, req_per_s: float, server_pct: float) -> dict[str, Any]:
        cpu = {"server_pct": server_pct, "wrk_pct": 5.0, "other_pct": 5.0}
        r = {**_run("ours", "postgres", req_per_s), "workers": workers, "cpu": cpu, "cpus": 2}
        return r

    # One worker used 60% of two cores for 1,000 req/s: 1,200 µs a request, so two cores
    # give at most 1,666 req/s, 1.67x; two workers that used 90% for 1,400 spent 1,286 µs.
    ratios = compute_ratios([run(1, 1000.0, 50.0), run(2, 1400.0, 80.0)], {})["demo"]
    assert ratios["workers_2_over_1_postgres_c32"]["value"] == 1.4
    assert ratios["workers_2_over_1_postgres_c32_bound"]["value"] == 1.667
    assert ratios["cpu_us_per_request_postgres_2_over_1"]["value"] == 1.071


def test_rows1000_takes_turns_and_reports_each_server_over_the_floor() -> None:
    plan = build_plan(["demo"], "rows1000", rounds=3, baseline="/tmp/main")
    labels = [g.server.label for g in plan]
    assert labels[:3] == ["demo ours 1w sqlite", "demo ours 1w off", "demo baseline 1w sqlite"]
    assert labels == labels[:3] * 3
    assert {(r.route, r.rows, r.connections) for g in plan for r in g.runs} == {
        ("predict", 1000, 1)
    }

    def big(server: str, audit: str, req_per_s: float, p50: float) -> dict[str, Any]:
        run = _run(server, audit, req_per_s)
        return {**run, "rows": 1000, "connections": 1, "latency_ms": {"p50": p50}}

    runs = [
        *(big("ours", "sqlite", r, 1000 / r) for r in (100.0, 125.0, 110.0)),
        *(big("ours", "off", r, 1000 / r) for r in (130.0, 140.0, 120.0)),
        *(big("baseline", "sqlite", r, 1000 / r) for r in (90.0, 95.0, 100.0)),
    ]
    floor = {"demo": {"1000": {"predict_ms": 2.0, "predict_after_idle_ms": 2.5}}}
    ratios = compute_ratios(runs, floor)["demo"]
    assert ratios["http_1000_over_floor"]["value"] == round(1000 / 110 / 2.0, 2)
    assert ratios["http_1000_over_floor_after_idle"]["value"] == round(1000 / 110 / 2.5, 2)
    assert ratios["http_1000_trail_off_over_floor"]["value"] == round(1000 / 130 / 2.0, 2)
    assert ratios["http_1000_baseline_over_floor"]["value"] == round(1000 / 95 / 2.0, 2)
    # Measured in the default matrix without a baseline: no empty baseline row.
    assert "http_1000_baseline_over_floor" not in compute_ratios(runs[:6], floor)["demo"]


def test_batch_alternates_ours_and_bare_and_reports_the_1000_row_ratios() -> None:
    plan = build_plan(["demo"], "batch", rounds=2)
    assert [g.server.label for g in plan] == ["demo ours 1w sqlite", "demo bare 1w"] * 2
    ours = {(r.route, r.rows, r.connections) for r in plan[0].runs}
    assert ours == {
        ("predict_prediction", 1000, 1), ("predict_prediction", 1000, 8),
        ("predict", 1000, 1), ("predict", 1000, 8), ("predict", 1, 32), ("grpc", 1, 32),
    }  # fmt: skip
    assert {(r.route, r.rows) for r in plan[1].runs} == {("predict", 1000), ("predict", 1)}

    def big(server: str, audit: str, route: str, c: int, req_per_s: float) -> dict[str, Any]:
        return {**_run(server, audit, req_per_s), "route": route, "rows": 1000, "connections": c}

    runs = [
        *(big("ours", "sqlite", "predict_prediction", 1, r) for r in (400.0, 500.0, 450.0)),
        *(big("ours", "sqlite", "predict", 8, r) for r in (200.0, 210.0, 190.0)),
        *(big("bare", "-", "predict", 1, r) for r in (600.0, 500.0, 550.0)),
        *(big("bare", "-", "predict", 8, r) for r in (700.0, 650.0, 600.0)),
    ]
    ratios = compute_ratios(runs, {})["demo"]
    assert ratios["rows1000_prediction_over_bare_c1"]["value"] == round(450 / 550, 3)
    assert ratios["rows1000_default_over_bare_c8"]["value"] == round(200 / 650, 3)
    assert ratios["rows1000_default_over_bare_c1"]["value"] is None


def test_grpc_alternates_ours_and_the_ceiling_at_single_rows() -> None:
    plan = build_plan(["demo"], "grpc", rounds=3)
    assert [g.server.label for g in plan] == ["demo ours 1w sqlite", "demo ceiling 1w"] * 3
    for group in plan:
        assert [(r.route, r.rows, r.connections) for r in group.runs] == [
            ("predict", 1, 32),
            ("grpc", 1, 32),
        ]
