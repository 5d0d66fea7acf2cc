"""The shadow's families: the staged version's realised comparison and its faults.

``iabma_shadow_nll_diff`` and ``iabma_shadow_rows`` are set (by each worker, the most
recent value wins) from the same computation as ``GET /performance?compare=staged``;
the counters count shadowed requests and the faults that stopped the shadow.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from app.metrics.families import _Maker

STAGED = ("staged_version",)


@dataclass(frozen=True)
class ShadowFamilies:
    nll_diff: Any
    rows: Any
    requests: Any
    faults: Any


@cache
def shadow_families() -> ShadowFamilies:
    """Build the families; call :func:`app.metrics.multiprocess.multiprocess_dir` first."""
    import prometheus_client

    make = _Maker(prometheus_client)
    return ShadowFamilies(
        nll_diff=make.gauge(
            "iabma_shadow_nll_diff",
            "Mean realised NLL of the staged version minus the served one's, paired on the "
            "same outcome rows (negative: the staged version is better).",
            "mostrecent",
            STAGED,
        ),
        rows=make.gauge(
            "iabma_shadow_rows",
            "Outcome rows scored under both the served and the staged version.",
            "mostrecent",
            STAGED,
        ),
        requests=make.counter(
            "iabma_shadow_requests",
            "Requests whose staged answer was computed and kept, all workers.",
            STAGED,
        ),
        faults=make.counter(
            "iabma_shadow_faults",
            "Faults of the shadow by stage: load (the staged version did not open), score "
            "(it failed on a request; shadowing stopped), write (a group was not kept), "
            "dropped (requests beyond the queue's bound).",
            (*STAGED, "stage"),
        ),
    )
