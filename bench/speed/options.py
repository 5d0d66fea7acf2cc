"""``bench/serve_speed.py``'s options: which matrix runs (the default, ``--quick``,
``--full``, or one target's rounds), on which bundles, for how long."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QUIET_PCT = 10.0  # share of the machine other processes may use when a run starts


def parse_args(argv: Sequence[str] | None, description: str) -> argparse.Namespace:
    """The options of ``bench/serve_speed.py``: the run matrix's mode, its rounds, and the
    defaults each mode sets."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--store", type=Path, default=REPO / "models_store", help="bundle store")
    p.add_argument("--bundles", help="comma list (default demo,california; --quick: demo)")
    p.add_argument("--duration", type=float, default=None, help="seconds per run (10; quick 1)")
    p.add_argument("--warmup", type=float, default=None, help="wrk warm-up per run (2; quick 0)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="every code path, ~1 min")
    mode.add_argument("--full", action="store_true", help="the wide matrix, ~1 h")
    mode.add_argument(
        "--oip", action="store_true", help="only the Open Inference Protocol targets (gRPC, binary)"
    )
    mode.add_argument(
        "--ratio",
        action="store_true",
        help="only ours/bare at single-row c32, in --rounds alternating rounds (medians)",
    )
    mode.add_argument(
        "--scaling",
        action="store_true",
        help="only 1 and 2 workers on a PostgreSQL trail (and the bare peer's), single-row "
        "c32, in --rounds alternating rounds, with what 2 workers could reach at most",
    )
    mode.add_argument(
        "--rows1000",
        action="store_true",
        help="only 1000-row /predict at c1 (SQLite trail, trail off), in --rounds alternating "
        "rounds, against the in-process floor",
    )
    mode.add_argument(
        "--batch",
        action="store_true",
        help="side by side in --rounds alternating rounds: 1000-row /predict at c1 and c8 "
        "(include prediction, and the default answer) against the bare peer, and gRPC "
        "against REST at single rows c32",
    )
    mode.add_argument(
        "--grpc",
        action="store_true",
        help="only single-row c32 gRPC ModelInfer against REST /predict in one server, and "
        "the trivial grpc.aio handler, in --rounds alternating rounds",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of --ratio, --scaling, --rows1000, --batch or --grpc (3)",
    )
    p.add_argument(
        "--chain-cost",
        action="store_true",
        help="with --ratio: ours on a SQLite trail without its chain (IABMA_AUDIT_CHAIN=false) "
        "takes its turn in every round too (issue 30's target: chain_on_over_off_c32 >= 0.95)",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="with --ratio or --rows1000: another checkout (e.g. `git archive main`) whose "
        "server takes its turn in every round",
    )
    p.add_argument(
        "--baseline-store",
        type=Path,
        default=None,
        help="the bundle store the baseline serves (default --store), for a baseline that "
        "cannot read bundles this checkout writes",
    )
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=None,
        help=f"max seconds to wait before a run for other processes to use < {QUIET_PCT:g}%% "
        "of the machine (default 5; quick 0)",
    )
    p.add_argument("--skip-mlserver", action="store_true")
    args = p.parse_args(argv)
    modes = {
        "quick": args.quick,
        "full": args.full,
        "oip": args.oip,
        "ratio": args.ratio,
        "scaling": args.scaling,
        "rows1000": args.rows1000,
        "batch": args.batch,
        "grpc": args.grpc,
    }
    args.mode = next((name for name, on in modes.items() if on), "default")
    if args.rounds < 1:
        p.error("--rounds is at least 1")
    rounds = args.mode in ("ratio", "rows1000")
    if args.baseline is not None and (not rounds or not (args.baseline / "app").is_dir()):
        p.error("--baseline takes a checkout (with app/) and goes with --ratio or --rows1000")
    if args.chain_cost and args.mode != "ratio":
        p.error("--chain-cost goes with --ratio (the default matrix measures it anyway)")
    bundles = args.bundles or ("demo" if args.quick else "demo,california")
    args.bundle_list = [b.strip() for b in bundles.split(",") if b.strip()]
    if args.duration is None:
        args.duration = 1.0 if args.quick else 10.0
    if args.warmup is None:
        args.warmup = 0.0 if args.quick else 2.0
    if args.quiet_wait is None:
        # Per run; a long wait rarely helps when other sessions run test suites for minutes.
        args.quiet_wait = 0.0 if args.quick else 5.0
    if args.duration < 1:
        p.error("--duration is at least 1 (wrk takes whole seconds)")
    return args
