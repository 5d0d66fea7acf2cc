"""How a record's answer is packed into the trail: arrays at the precision the answers
need, nothing stored that can be derived, request ids and input hashes as raw bytes.

The ``answer`` column is one blob: a flags byte, then little-endian float32 arrays.
float32 keeps 24 bits: every probability, weight and entropy read back is within 1e-7 of
what was served (``GET /weights`` re-derives the answers to 1e-6); regression's answers,
in target units, stay float64. A row of class
probabilities, and a row of weights, sum to 1: the largest of each is not stored. For
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
_F8 = np.dtype("<f8")
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


def _simplex(a: np.ndarray) -> bytes:
    """Vectors that sum to 1 (weights, class probabilities), each without its largest
    value: one byte for where it was, then the others as float32. The largest is at least
    1/K, so 1 - the others keeps it within K x 6e-8 relatively; a small one, stored
    itself, keeps float32's relative precision (a probability of 1e-5 stays exact to
    7 digits, and so does its log loss)."""
    k = a.shape[-1]
    flat = np.asarray(a, dtype=np.float64).reshape(-1, k)
    big = flat.argmax(axis=1)
    keep = np.ones_like(flat, dtype=bool)
    keep[np.arange(len(flat)), big] = False
    rest = flat[keep].reshape(len(flat), k - 1)
    return big.astype(np.uint8).tobytes() + np.ascontiguousarray(rest, dtype=_F4).tobytes()


def _simplex_size(vectors: int, k: int) -> int:
    return vectors * (1 + 4 * (k - 1))


def _unsimplex(raw: bytes, offset: int, vectors: int, k: int) -> np.ndarray:
    big = np.frombuffer(raw, np.uint8, count=vectors, offset=offset).astype(np.intp)
    stored = np.frombuffer(raw, _F4, count=vectors * (k - 1), offset=offset + vectors)
    rest = stored.astype(np.float64).reshape(vectors, k - 1)
    out = np.empty((vectors, k))
    keep = np.ones((vectors, k), dtype=bool)
    keep[np.arange(vectors), big] = False
    out[keep] = rest.ravel()
    out[np.arange(vectors), big] = 1.0 - rest.sum(axis=1)
    return out


def pack(
    task: str,
    weights: np.ndarray,
    prediction: np.ndarray,
    uncertainty: np.ndarray,
    expert_outputs: np.ndarray | None,
    expert_spread: np.ndarray | None,
) -> bytes:
    """Weights and class probabilities as :func:`_simplex` vectors, entropies float32;
    regression's answers (in target units, where float32 keeps only 7 digits) float64."""
    flags = _HAS_EXPERTS if expert_outputs is not None else 0
    parts = [bytes([flags]), _simplex(weights)]
    if task == "classification":
        parts += [_simplex(prediction), np.ascontiguousarray(uncertainty[:, :2], _F4).tobytes()]
        if expert_outputs is not None:
            parts.append(_simplex(expert_outputs))
    else:
        tail = [prediction, uncertainty]
        if expert_outputs is not None:
            tail.append(expert_outputs)
            if expert_spread is not None:
                tail.append(expert_spread)
        parts += [np.ascontiguousarray(p, dtype=_F8).tobytes() for p in tail]
    return b"".join(parts)


def pack_many(
    task: str,
    weights: np.ndarray,
    prediction: np.ndarray,
    uncertainty: np.ndarray,
    expert_outputs: np.ndarray | None,
    expert_spread: np.ndarray | None,
) -> list[bytes]:
    """:func:`pack` of ``g`` records alike in shape at once: each array has the records on
    a new first axis (``expert_spread``, the model's, is shared), and each record's blob is
    byte for byte the one :func:`pack` gives it. A single-row record took 12 us in
    :func:`pack`, most of it numpy's cost per call; a group of them shares the calls."""
    g = weights.shape[0]
    flags = _HAS_EXPERTS if expert_outputs is not None else 0
    columns = [np.full((g, 1), flags, np.uint8), _simplex_rows(weights)]
    if task == "classification":
        columns += [_simplex_rows(prediction), _bytes_rows(uncertainty[..., :2], _F4)]
        if expert_outputs is not None:
            columns.append(_simplex_rows(expert_outputs))
    else:
        tail = [prediction, uncertainty]
        if expert_outputs is not None:
            tail.append(expert_outputs)
        columns += [_bytes_rows(p, _F8) for p in tail]
        if expert_outputs is not None and expert_spread is not None:
            spread = np.frombuffer(np.ascontiguousarray(expert_spread, _F8).tobytes(), np.uint8)
            columns.append(np.broadcast_to(spread, (g, len(spread))))
    table = np.hstack(columns)
    raw, width = table.tobytes(), table.shape[1]
    return [raw[k : k + width] for k in range(0, g * width, width)]


def _simplex_rows(a: np.ndarray) -> np.ndarray:
    """Per record (first axis), the bytes :func:`_simplex` gives its vectors, as uint8."""
    g, k = a.shape[0], a.shape[-1]
    flat = np.asarray(a, dtype=np.float64).reshape(-1, k)
    big = flat.argmax(axis=1)
    keep = np.ones_like(flat, dtype=bool)
    keep[np.arange(len(flat)), big] = False
    rest = flat[keep].reshape(g, -1)
    return np.hstack([big.astype(np.uint8).reshape(g, -1), _bytes_rows(rest, _F4)])


def _bytes_rows(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Per record (first axis), its values as ``dtype``'s bytes, as uint8."""
    return np.ascontiguousarray(a, dtype=dtype).reshape(a.shape[0], -1).view(np.uint8)


def unpack(blob: bytes, task: str, n: int, m: int, classes: int) -> Answer:
    """The arrays of :func:`pack`, for a record of ``n`` rows, ``m`` experts and
    ``classes`` classes (0 for regression)."""
    raw = bytes(blob)
    at = 1
    weights = _unsimplex(raw, at, n, m)
    at += _simplex_size(n, m)
    has_experts = bool(raw[0] & _HAS_EXPERTS)
    outputs: np.ndarray | None = None
    spread: np.ndarray | None = None
    if task == "classification":
        prediction = _unsimplex(raw, at, n, classes)
        at += _simplex_size(n, classes)
        pair = np.frombuffer(raw, _F4, count=2 * n, offset=at).astype(np.float64).reshape(n, 2)
        at += 8 * n
        epistemic = pair[:, 0] - pair[:, 1]
        uncertainty = np.column_stack([pair, epistemic, selection_uncertainty(weights)])
        if has_experts:
            outputs = _unsimplex(raw, at, n * m, classes).reshape(n, m, classes)
        return Answer(weights, prediction, uncertainty, outputs, spread)
    values = np.frombuffer(raw, _F8, offset=at)
    prediction = values[: n * REGRESSION_FIELDS].reshape(n, REGRESSION_FIELDS)
    uncertainty = values[n * REGRESSION_FIELDS : n * (REGRESSION_FIELDS + 4)].reshape(n, 4)
    rest = values[n * (REGRESSION_FIELDS + 4) :]
    if has_experts:
        outputs = rest[: n * m].reshape(n, m)
        if len(rest) > n * m:
            spread = rest[n * m :]
    return Answer(weights, prediction, uncertainty, outputs, spread)


def top_counts(weights: np.ndarray) -> np.ndarray:
    """Per expert, the rows where it had the largest weight."""
    return np.bincount(weights.argmax(axis=1), minlength=weights.shape[1])


def weight_sums(blobs: list[bytes], ns: list[int], m: int) -> tuple[np.ndarray, np.ndarray]:
    """Per record, its weights summed over its rows (k, m) and the rows where each expert
    was on top (k, m): records grouped by their number of rows, a few numpy calls a group
    (the weights lead each blob, after the flags byte)."""
    k = len(blobs)
    sums = np.empty((k, m))
    tops = np.empty((k, m), dtype=np.int64)
    sizes = np.asarray(ns)
    for n in np.unique(sizes).tolist():
        picks = np.flatnonzero(sizes == n)
        size = _simplex_size(n, m)
        # Per record: n position bytes, then n * (m - 1) floats; regrouped into two runs.
        joined = b"".join(bytes(blobs[i])[1 : 1 + size] for i in picks)
        each = np.frombuffer(joined, np.uint8).reshape(len(picks), size)
        big = each[:, :n].reshape(-1).tobytes()
        rest = each[:, n:].reshape(-1).tobytes()
        w = _unsimplex(big + rest, 0, len(picks) * n, m).reshape(len(picks), n, m)
        sums[picks] = w.sum(axis=1)
        tops[picks] = np.eye(m, dtype=np.int64)[w.argmax(axis=2)].sum(axis=1)
    return sums, tops
