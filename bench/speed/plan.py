"""The run matrix: which servers start, and which loads each one takes.

The cartesian product (3 servers x 2 workers x 3 trails x 2 routes x 2 sizes x 4
concurrencies x 2 bundles) is hours; the default keeps what the ratios and the questions
behind them need, and ``--full`` widens it. Per bundle, the default is:

- ours 1 worker, SQLite trail and trail off: the full single-row ``/predict`` sweep (c1, c8,
  c32, c64), single-row OIP at c32, 1000-row ``/predict`` at c1 (for the in-process floor
  ratio) and c8; 1000-row OIP at c8 with SQLite;
- ours PostgreSQL trail: 1 worker and 2 workers at c32 single-row, 2 workers at c8 1000-row;
- ours 2 workers, trail off: c32 single-row (worker scaling without the trail);
- bare peer: single-row c1 and c32, 1000-row c1 and c8; 2 workers at c32 single-row;
- MLServer: OIP single-row c32, 1000-row c8;
- the ceiling (bench/peers/ceiling.py: an empty ASGI app and a trivial gRPC handler):
  single-row c32 on each, the most any Python server reaches here.

The Open Inference Protocol's own targets run on ours 1 worker with the SQLite trail:
gRPC single-row ``ModelInfer`` at c32 (against ``/predict`` c32) and 1000-row OIP infer with
binary tensors at c8 (against JSON OIP infer c8); ``--oip`` runs only those four loads.

The chain's cost (issue 30: ours/bare within 5% of the ratio without the chain) is ours 1
worker on a SQLite trail written without its chain (``sqlite-nochain``,
``IABMA_AUDIT_CHAIN=false``, never for production) at single-row c32, in the default
matrix and, with ``--chain-cost``, in every ``--ratio`` round.

``--scaling`` runs ours on a PostgreSQL trail with 1 and 2 workers (and the bare peer with
1 and 2) at single-row c32, in ``--rounds`` alternating rounds; the report adds what 2
workers could reach at most, from the CPU time a request took with one.

``--ratio`` runs only the headline ratio, ours (1 worker, SQLite trail) against the bare
peer at single-row c32, in ``--rounds`` alternating rounds, so that both see the machine's
slow spells alike; the ratio is taken between the two servers' medians. With
``--baseline DIR`` the same server from another checkout (e.g. ``git archive main``) takes
its turn in every round too, so that a change is judged against the code before it on the
same hour of the machine.

``--rows1000`` runs only the 1000-row target: 1000-row ``/predict`` at c1 on ours with the
SQLite trail and with the trail off (and on the ``--baseline`` checkout's server, SQLite
trail), each on a fresh trail, in ``--rounds`` alternating rounds; its ratios are the
medians' p50 over the in-process floor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.peers.ours import NO_CHAIN

SWEEP = (1, 8, 32, 64)
BIG = 1000  # rows per batch request; the app's default IABMA_MAX_BATCH_ROWS


@dataclass(frozen=True)
class ServerSpec:
    # "ours", "bare", "mlserver", "ceiling", or "baseline": ours from another checkout
    kind: str
    bundle: str
    workers: int = 1
    # ours and the baseline only: "sqlite", "postgres", "off" or "sqlite-nochain"
    audit: str = "-"
    tree: str = ""  # the baseline's checkout
    store: str = ""  # the baseline's bundle store, when it cannot read this checkout's

    @property
    def label(self) -> str:
        audit = f" {self.audit}" if self.kind in ("ours", "baseline") else ""
        return f"{self.bundle} {self.kind} {self.workers}w{audit}"


@dataclass(frozen=True)
class Run:
    server: ServerSpec
    # "predict" (native body), "columnar" (the same, columnar answer), "oip" (JSON OIP),
    # "oip_binary" (the binary tensor data extension), "grpc" (OIP ModelInfer over gRPC) or
    # "predict_prediction" (the native body with include: ["prediction"])
    route: str
    rows: int
    connections: int

    @property
    def label(self) -> str:
        return f"{self.server.label} {self.route} x{self.rows} c{self.connections}"


@dataclass(frozen=True)
class Group:
    """One server start and the runs it takes, in order."""

    server: ServerSpec
    runs: tuple[Run, ...]


def _group(server: ServerSpec, loads: Sequence[tuple[str, int, Sequence[int]]]) -> Group:
    runs = tuple(Run(server, route, rows, c) for route, rows, conns in loads for c in conns)
    return Group(server, runs)


def _bundle_default(b: str) -> list[Group]:
    return [
        _group(
            ServerSpec("ours", b, 1, "sqlite"),
            [
                ("predict", 1, SWEEP),
                ("oip", 1, [32]),
                ("predict", BIG, [1, 8]),
                ("columnar", BIG, [1]),
                ("oip", BIG, [8]),
                ("grpc", 1, [32]),
                ("oip_binary", BIG, [8]),
            ],
        ),
        _group(
            ServerSpec("ours", b, 1, "off"),
            [("predict", 1, SWEEP), ("oip", 1, [32]), ("predict", BIG, [1, 8])],
        ),
        _group(ServerSpec("ours", b, 1, NO_CHAIN), [("predict", 1, [32])]),
        _group(ServerSpec("ours", b, 1, "postgres"), [("predict", 1, [32])]),
        _group(ServerSpec("ours", b, 2, "postgres"), [("predict", 1, [32]), ("predict", BIG, [8])]),
        _group(ServerSpec("ours", b, 2, "off"), [("predict", 1, [32])]),
        _group(ServerSpec("bare", b), [("predict", 1, [1, 32]), ("predict", BIG, [1, 8])]),
        _group(ServerSpec("bare", b, 2), [("predict", 1, [32])]),
        _group(ServerSpec("mlserver", b), [("oip", 1, [32]), ("oip", BIG, [8])]),
        _group(ServerSpec("ceiling", b), [("predict", 1, [32]), ("grpc", 1, [32])]),
    ]


def _bundle_full(b: str) -> list[Group]:
    groups = []
    for workers in (1, 2):
        for audit in ("sqlite", "postgres", "off"):
            loads = [("predict", 1, SWEEP), ("oip", 1, [32]), ("predict", BIG, [1, 4, 8])]
            loads += [("oip", BIG, [8]), ("grpc", 1, [32]), ("oip_binary", BIG, [8])]
            groups.append(_group(ServerSpec("ours", b, workers, audit), loads))
        bare = [("predict", 1, SWEEP), ("predict", BIG, [1, 8])]
        groups.append(_group(ServerSpec("bare", b, workers), bare))
    groups.append(_group(ServerSpec("mlserver", b), [("oip", 1, SWEEP), ("oip", BIG, [1, 8])]))
    groups.append(_group(ServerSpec("ceiling", b), [("predict", 1, SWEEP), ("grpc", 1, [32])]))
    return groups


def _bundle_quick(b: str) -> list[Group]:
    """One run per code path: each trail, both routes, a batch, 2 workers, every peer."""
    return [
        _group(
            ServerSpec("ours", b, 1, "sqlite"),
            [
                ("predict", 1, [8]),
                ("oip", 1, [8]),
                ("predict", BIG, [1]),
                ("columnar", BIG, [1]),
                ("grpc", 1, [8]),
                ("oip_binary", BIG, [1]),
            ],
        ),
        _group(ServerSpec("ours", b, 1, "off"), [("predict", 1, [8])]),
        _group(ServerSpec("ours", b, 1, NO_CHAIN), [("predict", 1, [8])]),
        _group(ServerSpec("ours", b, 2, "postgres"), [("predict", 1, [8])]),
        _group(ServerSpec("bare", b), [("predict", 1, [8])]),
        _group(ServerSpec("mlserver", b), [("oip", 1, [8])]),
        _group(ServerSpec("ceiling", b), [("predict", 1, [8]), ("grpc", 1, [8])]),
    ]


def _bundle_oip(b: str) -> list[Group]:
    """The two OIP targets, each against its baseline in the same server."""
    loads = [("predict", 1, [32]), ("grpc", 1, [32]), ("oip", BIG, [8]), ("oip_binary", BIG, [8])]
    return [
        _group(ServerSpec("ours", b, 1, "sqlite"), loads),
        _group(ServerSpec("ceiling", b), [("predict", 1, [32]), ("grpc", 1, [32])]),
    ]


def _bundle_ratio(
    b: str, rounds: int, baseline: str, store: str, chain_cost: bool = False
) -> list[Group]:
    """Ours (and the baseline, and ours without the chain) against the bare peer,
    single-row c32, ``rounds`` times in turn."""
    load = [("predict", 1, [32])]
    turn = [_group(ServerSpec("ours", b, 1, "sqlite"), load), _group(ServerSpec("bare", b), load)]
    if baseline:
        turn.append(_group(ServerSpec("baseline", b, 1, "sqlite", baseline, store), load))
    if chain_cost:
        turn.append(_group(ServerSpec("ours", b, 1, NO_CHAIN), load))
    return turn * rounds


def _bundle_scaling(b: str, rounds: int) -> list[Group]:
    """Ours on a PostgreSQL trail with 1 and 2 workers, single-row c32, ``rounds`` times in
    turn, with the bare peer's 1 and 2 workers beside them (what 2 cores give at best)."""
    load = [("predict", 1, [32])]
    turn = [
        _group(ServerSpec("ours", b, 1, "postgres"), load),
        _group(ServerSpec("ours", b, 2, "postgres"), load),
        _group(ServerSpec("bare", b), load),
        _group(ServerSpec("bare", b, 2), load),
    ]
    return turn * rounds


def _bundle_rows1000(b: str, rounds: int, baseline: str, store: str) -> list[Group]:
    """The 1000-row c1 target alone, ``rounds`` times in turn: ours with the SQLite trail,
    with the trail off (what the trail costs), and the baseline's server."""
    load = [("predict", BIG, [1])]
    turn = [
        _group(ServerSpec("ours", b, 1, "sqlite"), load),
        _group(ServerSpec("ours", b, 1, "off"), load),
    ]
    if baseline:
        turn.append(_group(ServerSpec("baseline", b, 1, "sqlite", baseline, store), load))
    return turn * rounds


def _bundle_batch(b: str, rounds: int) -> list[Group]:
    """Issue 46's side-by-side: ours (SQLite trail) and the bare peer in turn, 1000 rows at
    c1 and c8 with ``include: ["prediction"]`` and the default answer, then single rows
    at c32 over REST and gRPC; ``rounds`` times."""
    ours = [
        ("predict_prediction", BIG, [1, 8]),
        ("predict", BIG, [1, 8]),
        ("predict", 1, [32]),
        ("grpc", 1, [32]),
    ]
    bare = [("predict", BIG, [1, 8]), ("predict", 1, [32])]
    turn = [_group(ServerSpec("ours", b, 1, "sqlite"), ours), _group(ServerSpec("bare", b), bare)]
    return turn * rounds


def _bundle_grpc(b: str, rounds: int) -> list[Group]:
    """Single rows at c32: our gRPC ModelInfer against our REST /predict in the same
    server (SQLite trail), then the trivial grpc.aio handler and empty ASGI app (what the
    stack allows); ``rounds`` times in turn."""
    load = [("predict", 1, [32]), ("grpc", 1, [32])]
    turn = [
        _group(ServerSpec("ours", b, 1, "sqlite"), load),
        _group(ServerSpec("ceiling", b), load),
    ]
    return turn * rounds


def build_plan(
    bundles: Sequence[str],
    mode: str,
    rounds: int = 1,
    baseline: str = "",
    store: str = "",
    chain_cost: bool = False,
) -> list[Group]:
    if mode == "ratio":
        return [g for b in bundles for g in _bundle_ratio(b, rounds, baseline, store, chain_cost)]
    if mode == "scaling":
        return [g for b in bundles for g in _bundle_scaling(b, rounds)]
    if mode == "rows1000":
        return [g for b in bundles for g in _bundle_rows1000(b, rounds, baseline, store)]
    if mode == "batch":
        return [g for b in bundles for g in _bundle_batch(b, rounds)]
    if mode == "grpc":
        return [g for b in bundles for g in _bundle_grpc(b, rounds)]
    per_bundle = {
        "quick": _bundle_quick,
        "default": _bundle_default,
        "full": _bundle_full,
        "oip": _bundle_oip,
    }[mode]
    return [g for b in bundles for g in per_bundle(b)]


# Rough costs for the up-front estimate, measured on this 2-core machine.
START_S = {"ours": 4.0, "baseline": 4.0, "bare": 3.0, "mlserver": 12.0, "ceiling": 2.0}
RUN_OVERHEAD_S = 1.0  # pre-flight request, wrk start-up, parsing
FLOOR_S = {
    "quick": 3.0,
    "default": 15.0,
    "full": 15.0,
    "oip": 15.0,
    "ratio": 15.0,
    "scaling": 15.0,
    "rows1000": 15.0,
    "batch": 15.0,
    "grpc": 15.0,
}


def estimate_seconds(plan: Sequence[Group], duration: float, warmup: float, mode: str) -> float:
    runs = sum(len(g.runs) for g in plan)
    starts = sum(START_S[g.server.kind] for g in plan)
    bundles = {g.server.bundle for g in plan}
    return runs * (duration + warmup + RUN_OVERHEAD_S) + starts + FLOOR_S[mode] * len(bundles)
