"""A group's rows built together are the rows each record gives on its own, byte for byte:
the chain's digests and audit-verify depend on it."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac

import numpy as np

from app.audit.store import packing
from app.audit.store.records import AuditRecord, canonical_json
from app.audit.write.group_rows import log_rows
from tests.support.services import make_record

KEY = b"k" * 32


def _simplex(rng: np.random.Generator, *shape: int, dtype: type = np.float64) -> np.ndarray:
    a = rng.random(shape) + 1e-3
    return (a / a.sum(axis=-1, keepdims=True)).astype(dtype)


def classification(rng: np.random.Generator, rid: str, n: int, dtype: type) -> AuditRecord:
    m, c = 3, 4
    return dataclasses.replace(
        make_record(rid),
        experts=("a", "b", "c"),
        classes=(0, 1, 2, 3),
        weights=_simplex(rng, n, m, dtype=dtype),
        prediction=_simplex(rng, n, c, dtype=dtype),
        uncertainty=rng.random((n, 4)).astype(dtype),
        expert_outputs=_simplex(rng, n, m, c, dtype=dtype),
        instances=[{"x": float(v), "s": "é"} for v in rng.random(n)],
    )


def regression(
    rng: np.random.Generator, rid: str, n: int, spread: np.ndarray | None
) -> AuditRecord:
    m = 3
    return dataclasses.replace(
        make_record(rid),
        task="regression",
        experts=("a", "b", "c"),
        classes=None,
        weights=_simplex(rng, n, m),
        prediction=rng.normal(size=(n, 4)) * 1e5,
        uncertainty=rng.random((n, 4)),
        expert_outputs=rng.normal(size=(n, m)) * 1e5 if spread is not None else None,
        expert_spread=spread,
        input_mode="full",
    )


def test_a_mixed_group_gives_each_record_its_own_row() -> None:
    rng = np.random.default_rng(7)
    spread = np.array([0.5, 1.5, 2.5, 1.1])
    other_spread = np.array([0.25, 1.0, 2.0, 0.9])
    records = [
        *(classification(rng, f"c1-{k}", 1, np.float64) for k in range(6)),
        *(classification(rng, f"c32-{k}", 1, np.float32) for k in range(3)),
        *(classification(rng, f"c3-{k}", 3, np.float64) for k in range(4)),
        *(regression(rng, f"r1-{k}", 1, spread) for k in range(5)),
        *(regression(rng, f"r1s-{k}", 1, other_spread) for k in range(2)),  # a swap
        *(regression(rng, f"r2-{k}", 2, None) for k in range(3)),
        make_record("lone"),
    ]
    records[1] = dataclasses.replace(records[1], input_mode="off")
    rows = [r.log_values() for r in records]
    rng.shuffle(order := np.arange(len(records)))
    shuffled = [records[k] for k in order]
    assert log_rows(records) == rows
    assert log_rows(shuffled) == [rows[k] for k in order]


def test_a_group_of_one_and_of_none() -> None:
    record = make_record("one")
    assert log_rows([record]) == [record.log_values()]
    assert log_rows([]) == []


def test_packed_together_each_blob_is_the_one_packed_alone() -> None:
    rng = np.random.default_rng(3)
    group = [classification(rng, f"g-{k}", 2, np.float64) for k in range(5)]
    blobs = packing.pack_many(
        "classification",
        np.stack([r.weights for r in group]),
        np.stack([r.prediction for r in group]),
        np.stack([r.uncertainty for r in group]),
        np.stack([r.expert_outputs for r in group]),  # type: ignore[misc]
        None,
    )
    assert blobs == [r.answer() for r in group]


def test_the_input_hash_is_the_keyed_hmac_of_the_canonical_rows() -> None:
    for key in (KEY, b"another key, longer than one block of sha256: " * 2):
        record = dataclasses.replace(make_record("h"), hash_key=key)
        (row,) = log_rows([record])
        want = hmac.new(key, canonical_json([{"x": 1}]), hashlib.sha256).digest()
        assert row[6] == want
