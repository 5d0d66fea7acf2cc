"""Tensor data as raw bytes, shared by the binary tensor data extension and gRPC.

The Open Inference Protocol's raw layout: elements in little-endian byte order, row-major,
with no padding; a ``BYTES`` element is a 4-byte little-endian unsigned length followed by
that many bytes. Every fault names the tensor and says what the sizes were, so a client
that framed a body wrongly learns where.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.errors import Fault, InvalidInput

# The protocol's numeric datatypes and their little-endian numpy types.
NUMPY_TYPES: dict[str, str] = {
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
    "INT8": "i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "UINT8": "u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
}
_LENGTH = struct.Struct("<I")
_INTEGER_RANGES = {
    name: (int(np.iinfo(t).min), int(np.iinfo(t).max))
    for name, t in NUMPY_TYPES.items()
    if name.startswith(("INT", "UINT"))
}
_FP16_LIMIT = 65520.0  # from here on a value rounds to infinity in FP16 (its max is 65504)


@dataclass(frozen=True, slots=True)
class Raw:
    """A tensor's data as raw bytes, standing where JSON would put ``data``."""

    data: bytes | memoryview


def bad(field: str, message: str) -> InvalidInput:
    return InvalidInput([Fault("invalid_tensor", field, message)])


def numeric_array(raw: Raw, datatype: str, count: int, field: str, name: str) -> np.ndarray:
    """``count`` elements of a numeric ``datatype``; the byte size must be exact."""
    dtype = np.dtype(NUMPY_TYPES[datatype])
    need = count * dtype.itemsize
    if len(raw.data) != need:
        raise bad(
            field,
            f"tensor {name!r}: {count} {datatype} elements take {need} bytes, "
            f"but its binary data has {len(raw.data)}",
        )
    return np.frombuffer(raw.data, dtype=dtype)


def check_declared(values: Sequence[Any], datatype: str, field: str, name: str) -> None:
    """JSON numbers must be values of their tensor's declared ``datatype``.

    Raw and gRPC data cannot break this, but JSON can say ``INT8`` and send 300, or
    ``INT64`` and send 1.5; taking them as sent would hide a client bug that another
    server would refuse. FP32 and FP64 are left to the feature's own range check.
    """
    bounds = _INTEGER_RANGES.get(datatype)
    if bounds is None and datatype != "FP16":
        return
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue  # null is missing; other types get the feature's own wrong_type
        if isinstance(v, float) and not math.isfinite(v):
            continue  # the feature's own check names it: Infinity is never taken
        if bounds is None:
            if abs(v) >= _FP16_LIMIT:
                raise bad(f"{field}[{i}]", f"tensor {name!r}: {v!r} is outside FP16's range")
            continue
        if isinstance(v, float) and not v.is_integer():
            raise bad(
                f"{field}[{i}]", f"tensor {name!r}: {v!r} is not a whole number, as {datatype} is"
            )
        if not bounds[0] <= v <= bounds[1]:
            raise bad(
                f"{field}[{i}]",
                f"tensor {name!r}: {v!r} is outside {datatype}'s range {bounds[0]} to {bounds[1]}",
            )


def byte_elements(raw: Raw, count: int, field: str, name: str) -> list[bytes]:
    """The elements of a raw ``BYTES`` tensor; their number must be ``count``."""
    data, pos = raw.data, 0
    out: list[bytes] = []
    size = len(data)
    while pos < size:
        if pos + 4 > size:
            raise bad(
                field,
                f"tensor {name!r}: BYTES element {len(out)} starts at byte {pos} but its "
                f"4-byte length would run past the end ({size} bytes)",
            )
        (length,) = _LENGTH.unpack_from(data, pos)
        pos += 4
        if pos + length > size:
            raise bad(
                field,
                f"tensor {name!r}: BYTES element {len(out)} says {length} bytes but only "
                f"{size - pos} remain",
            )
        out.append(bytes(data[pos : pos + length]))
        pos += length
    if len(out) != count:
        raise bad(
            field, f"tensor {name!r}: holds {len(out)} BYTES elements but the shape says {count}"
        )
    return out


def texts(elements: Sequence[bytes], field: str, name: str) -> list[str]:
    """BYTES elements as the strings categorical features hold."""
    try:
        return [e.decode("utf-8") for e in elements]
    except UnicodeDecodeError:
        i = next(k for k, e in enumerate(elements) if not _is_utf8(e))
        raise bad(f"{field}[{i}]", f"tensor {name!r}: element {i} is not UTF-8 text") from None


def _is_utf8(e: bytes) -> bool:
    try:
        e.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def to_raw(datatype: str, data: Any) -> bytes:
    """An output tensor's data (a numpy array, or a list of labels) as raw bytes."""
    if datatype == "BYTES":
        parts: list[bytes] = []
        for value in data:
            b = value if isinstance(value, bytes) else str(value).encode("utf-8")
            parts += (_LENGTH.pack(len(b)), b)
        return b"".join(parts)
    return np.ascontiguousarray(data, dtype=NUMPY_TYPES[datatype]).tobytes()
