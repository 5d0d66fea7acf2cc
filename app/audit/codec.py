"""How a record's answer is packed into the trail: arrays at the precision the answers
need, nothing stored that can be derived, request ids and input hashes as raw bytes.

The ``answer`` column is one blob: a flags byte, then little-endian float32 arrays.
float32 keeps 24 bits: every probability, weight and entropy read back is within 1e-7 of
what was served (``GET /weights`` re-derives the answers to 1e-6). A row of class
probabilities, and a row of weights, sum to 1: the last of each is not stored. For
classification the epistemic entropy is total - aleatoric, and selection the normalised
entropy of the weights; neither is stored. Single-row records of the demo bundle take 48
bytes of arrays where the float64 columns took 280 (docs/design.md, "Compact records").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from app.bundle.mixture import selection_uncertainty

_F4 = np.dtype("<f4")
_HAS_EXPERTS = 1
_HEX_ID = re.compile(r"^[0-9a-f]{32}$")
_TEXT_MARK = b"\xff"  # never in UTF-8: marks a 16-byte text id apart from a packed one
REGRESSION_FIELDS = 4  # mean, std, lower, upper


def pack_request_id(rid: str) -> bytes:
    """32 lowercase hex digits (the server's own ids) as their 16 bytes; any other id as
    its UTF-8, marked when it is 16 bytes long too."""
    if _HEX_ID.match(rid):
        return bytes.fromhex(rid)
    data = rid.encode("utf-8")
    return data + _TEXT_MARK if len(data) == 16 else data


def unpack_request_id(raw: bytes) -> str:
    raw = bytes(raw)
    if len(raw) == 16:
        return raw.hex()
    if len(raw) == 17 and raw.endswith(_TEXT_MARK):
        raw = raw[:-1]
    return raw.decode("utf-8")


@dataclass(frozen=True)
class Answer:
    """A record's arrays, float64 as the readers use them."""

    weights: np.ndarray  # (n, m)
    prediction: np.ndarray  # (n, C) probabilities, or (n, 4)
    uncertainty: np.ndarray  # (n, 4)
    expert_outputs: np.ndarray | None  # (n, m, C) probabilities, or (n, m) means
    expert_spread: np.ndarray | None  # regression: each expert's std (m,), the temperature


def _drop_last(a: np.ndarray) -> np.ndarray:
    return a[..., :-1]


def _restore_last(a: np.ndarray) -> np.ndarray:
    return np.concatenate([a, 1.0 - a.sum(axis=-1, keepdims=True)], axis=-1)


def pack(
    task: str,
    weights: np.ndarray,
    prediction: np.ndarray,
    uncertainty: np.ndarray,
    expert_outputs: np.ndarray | None,
    expert_spread: np.ndarray | None,
) -> bytes:
    parts = [_drop_last(weights)]
    if task == "classification":
        parts += [_drop_last(prediction), uncertainty[:, :2]]
        if expert_outputs is not None:
            parts.append(_drop_last(expert_outputs))
    else:
        parts += [prediction, uncertainty]
        if expert_outputs is not None:
            parts.append(expert_outputs)
            if expert_spread is not None:
                parts.append(expert_spread)
    flags = _HAS_EXPERTS if expert_outputs is not None else 0
    body = b"".join(np.ascontiguousarray(p, dtype=_F4).tobytes() for p in parts)
    return bytes([flags]) + body


def unpack(blob: bytes, task: str, n: int, m: int, classes: int) -> Answer:
    """The arrays of :func:`pack`, for a record of ``n`` rows, ``m`` experts and
    ``classes`` classes (0 for regression)."""
    raw = bytes(blob)
    values = np.frombuffer(raw, _F4, offset=1).astype(np.float64)
    at = 0

    def take(count: int, shape: tuple[int, ...]) -> np.ndarray:
        nonlocal at
        out = values[at : at + count].reshape(shape)
        at += count
        return out

    weights = _restore_last(take(n * (m - 1), (n, m - 1)))
    has_experts = bool(raw[0] & _HAS_EXPERTS)
    outputs = spread = None
    if task == "classification":
        prediction = _restore_last(take(n * (classes - 1), (n, classes - 1)))
        total_aleatoric = take(n * 2, (n, 2))
        epistemic = total_aleatoric[:, 0] - total_aleatoric[:, 1]
        selection = selection_uncertainty(weights)
        uncertainty = np.column_stack([total_aleatoric, epistemic, selection])
        if has_experts:
            outputs = _restore_last(take(n * m * (classes - 1), (n, m, classes - 1)))
    else:
        prediction = take(n * REGRESSION_FIELDS, (n, REGRESSION_FIELDS))
        uncertainty = take(n * 4, (n, 4))
        if has_experts:
            outputs = take(n * m, (n, m))
            if at < len(values):
                spread = values[at:]
    return Answer(weights, prediction, uncertainty, outputs, spread)


def top_counts(weights: np.ndarray) -> np.ndarray:
    """Per expert, the rows where it had the largest weight."""
    return np.bincount(weights.argmax(axis=1), minlength=weights.shape[1])


def weight_sums(blobs: list[bytes], ns: list[int], m: int) -> tuple[np.ndarray, np.ndarray]:
    """Per record, its weights summed over its rows (k, m) and the rows where each expert
    was on top (k, m): records of one row count grouped by size, a few numpy calls in all
    (the weights lead each blob)."""
    k = len(blobs)
    sums = np.empty((k, m))
    tops = np.empty((k, m), dtype=np.int64)
    sizes = np.asarray(ns)
    for n in np.unique(sizes).tolist():
        picks = np.flatnonzero(sizes == n)
        width = 4 * n * (m - 1)
        joined = b"".join(bytes(blobs[i])[1 : 1 + width] for i in picks)
        w = _restore_last(np.frombuffer(joined, _F4).astype(np.float64).reshape(-1, n, m - 1))
        sums[picks] = w.sum(axis=1)
        tops[picks] = np.eye(m, dtype=np.int64)[w.argmax(axis=2)].sum(axis=1)
    return sums, tops
