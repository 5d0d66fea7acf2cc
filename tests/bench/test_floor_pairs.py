"""The in-process floor's paired timing: the call after a sleep and the hot call beside it
are told apart, each pair under the same load."""

from __future__ import annotations

import time

from bench.speed.floor import _paired_ms


def test_pairs_tell_the_call_after_a_sleep_from_the_hot_one() -> None:
    """A call that is slow only after an idle gap (as a cold cache makes it) is timed slow
    after the sleep and fast right after, whatever order the pairs run in."""
    last = [time.perf_counter()]

    def call(_i: int) -> None:
        idle = time.perf_counter() - last[0] > 0.0005
        end = time.perf_counter() + (0.004 if idle else 0.001)
        while time.perf_counter() < end:
            pass
        last[0] = time.perf_counter()

    got = _paired_ms(call, repeats=15, warmup=2, idle_s=0.002)
    assert 0.9 < got["predict_ms"] < got["predict_after_idle_ms"]
    assert got["predict_after_idle_ms"] >= 3.9
    assert got["idle_over_hot"] > 2
