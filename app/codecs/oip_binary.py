"""The binary tensor data extension's framing on REST: a JSON header, then raw tensor data.

With ``Inference-Header-Content-Length: N`` the first N bytes of the body are the JSON
inference request and the rest is the data of every input whose ``parameters`` carry
``binary_data_size``, back to back in the order of the inputs. Each such input gets its
slice as :class:`app.codecs.tensors.Raw` in place of ``data``, and :func:`app.codecs.oip.decode`
validates it like JSON data. Sizes that do not add up are a 400 naming the tensor.
"""

from __future__ import annotations

from typing import Any

from app.codecs.tensors import Raw, bad
from app.core.inputs import json_type
from app.errors import InvalidHeader

HEADER = "inference-header-content-length"
HEADER_FIELD = "header Inference-Header-Content-Length"


def split(raw: bytes, declared: str | None) -> tuple[bytes, memoryview | None]:
    """The body's JSON part, and the binary data after it (None without the header)."""
    if declared is None:
        return raw, None
    text = declared.strip()
    if not text.isdigit():
        raise InvalidHeader(f"expected a byte count, got {declared!r}", field=HEADER_FIELD)
    n = int(text)
    if n > len(raw):
        raise InvalidHeader(
            f"says the JSON header is {n} bytes, but the whole body is {len(raw)}",
            field=HEADER_FIELD,
        )
    return raw[:n], memoryview(raw)[n:]


def attach(body: Any, binary: memoryview | None) -> None:
    """Hand each binary input its slice of ``binary``; the sizes must cover it exactly."""
    inputs = body.get("inputs") if isinstance(body, dict) else None
    if not isinstance(inputs, list):
        return  # decode() names what is wrong with the body itself
    pos, total = 0, len(binary) if binary is not None else 0
    for k, t in enumerate(inputs):
        params = t.get("parameters") if isinstance(t, dict) else None
        if not isinstance(params, dict) or "binary_data_size" not in params:
            continue
        assert isinstance(t, dict)
        name, field = t.get("name"), f"inputs[{k}].parameters.binary_data_size"
        size = params["binary_data_size"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise bad(field, f"tensor {name!r}: expected a byte count, got {json_type(size)}")
        if binary is None:
            raise bad(
                field,
                f"tensor {name!r} is binary, but the request has no "
                "Inference-Header-Content-Length header to say where its data starts",
            )
        if "data" in t:
            raise bad(
                f"inputs[{k}].data",
                f"tensor {name!r} has binary_data_size, so its data must not be in the JSON too",
            )
        if pos + size > total:
            raise bad(
                field,
                f"tensor {name!r}: {size} bytes from offset {pos} run past the binary data, "
                f"which is {total} bytes after the JSON header",
            )
        t["data"] = Raw(binary[pos : pos + size])
        pos += size
    if pos != total:
        raise bad(
            "body",
            f"{total} bytes of binary data follow the JSON header, but the inputs' "
            f"binary_data_size add up to {pos}",
        )
