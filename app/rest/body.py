"""Reading a JSON request body: content type (415), size limit (413), strict parsing (400
with line and column); ``NaN`` and ``Infinity`` are kept as :class:`NonFinite` markers so
the validator can name their field (docs/design.md, "Reading a request")."""

from __future__ import annotations

import json
import re
import sys
import zlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from app.core.inputs import NonFinite
from app.errors import (
    InvalidEncoding,
    InvalidJSON,
    PayloadTooLarge,
    UnsupportedEncoding,
    UnsupportedMediaType,
)

# zlib's window bits: 31 reads the gzip wrapper, 15 the zlib one (HTTP's "deflate"),
# -15 bare deflate data, which some clients send under the same name.
_WBITS = {"gzip": (31,), "x-gzip": (31,), "deflate": (15, -15)}


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


@dataclass(frozen=True, slots=True)
class BodyHeaders:
    """The request headers that say how to read its body, taken in one pass."""

    content_type: str | None = None
    content_length: str | None = None
    content_encoding: str | None = None
    binary_length: str | None = None  # the OIP's Inference-Header-Content-Length

    @classmethod
    def of(cls, raw: Iterable[tuple[bytes, bytes]]) -> BodyHeaders:
        """From ASGI's raw header list; the first of repeated headers counts, as in Starlette."""
        found: dict[bytes, str] = {}
        for key, value in raw:
            if key in _BODY_HEADERS and key not in found:
                found[key] = value.decode("latin-1")
        return cls(*(found.get(k) for k in _BODY_HEADERS))


_BODY_HEADERS = (
    b"content-type",
    b"content-length",
    b"content-encoding",
    b"inference-header-content-length",
)


def check_content_type(
    raw: str | None, missing_ok: bool = False, also: frozenset[str] = frozenset()
) -> None:
    """``application/json`` (or ``+json``); ``missing_ok``: no header reads as JSON too, as
    Open Inference Protocol clients send it; ``also``: further media types accepted."""
    media = (raw or "").split(";", 1)[0].strip().lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return
    if (raw is None and missing_ok) or media in also:
        return
    got = repr(raw) if raw else "none"
    raise UnsupportedMediaType(f"expected application/json, got {got}", field="header Content-Type")


async def chunks_of(receive: Receive) -> AsyncIterator[bytes]:
    """The body's chunks from ASGI ``receive``, as Starlette's ``Request.stream`` gives
    them: a client that hangs up meanwhile raises ``ClientDisconnect``."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        body = message.get("body", b"")
        if body:
            yield body
        if not message.get("more_body", False):
            return


BODY_LIMIT = "IABMA_MAX_BODY_BYTES"


async def read_body(
    chunks: AsyncIterator[bytes], head: BodyHeaders, max_bytes: int, limit: str = BODY_LIMIT
) -> bytes:
    """The whole body, refused with 413 as soon as it is known to exceed ``max_bytes``
    (named ``limit`` in the message): from ``Content-Length`` before a byte is read, else
    at the first chunk past it, and again once decoded."""
    declared = head.content_length
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(
            f"{int(declared)} bytes exceed the limit of {max_bytes} ({limit})", field="body"
        )
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"more than {max_bytes} bytes ({limit})", field="body")
        parts.append(chunk)
    raw = parts[0] if len(parts) == 1 else b"".join(parts)
    return decode(raw, head.content_encoding, max_bytes, limit)


def decode(raw: bytes, encoding: str | None, max_bytes: int, limit: str = BODY_LIMIT) -> bytes:
    """The body with its ``Content-Encoding`` undone; the size limit holds after decoding,
    so a small compressed body that inflates past it (a zip bomb) is refused with 413
    without inflating more than the limit."""
    codings = [c.strip().lower() for c in (encoding or "").split(",") if c.strip()]
    for coding in reversed(codings):  # the last coding listed was applied last
        if coding == "identity":
            continue
        if coding not in _WBITS:
            raise UnsupportedEncoding(
                f"{coding!r} is not supported; send gzip, deflate or identity",
                field="header Content-Encoding",
            )
        raw = _inflate(raw, coding, max_bytes, limit)
    return raw


def _inflate(raw: bytes, coding: str, max_bytes: int, limit: str) -> bytes:
    for wbits in _WBITS[coding]:
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(raw, max_bytes + 1)
        except zlib.error:
            continue
        if len(out) > max_bytes or inflater.unconsumed_tail:
            raise PayloadTooLarge(f"decodes to more than {max_bytes} bytes ({limit})", field="body")
        if not inflater.eof:
            raise InvalidEncoding(f"truncated {coding} data", field="body")
        return out
    raise InvalidEncoding(f"not valid {coding} data", field="body")


def parse_json(raw: bytes) -> Any:
    """The body's JSON value: orjson when it can be trusted, else the strict parser.

    orjson is an order of magnitude faster but keeps the last of two equal keys and knows
    no ``NaN``. So its answer is used only when the body has exactly as many object keys
    as orjson found; anything else (a duplicate, a ``NaN`` token, a huge integer, a
    syntax error, whitespace that could hide a key) goes through :func:`parse_strict`,
    which decides and names the fault.
    """
    if not raw.strip():
        raise InvalidJSON("empty body; expected a JSON object", field="body")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return parse_strict(raw)
    if _QUOTE_THEN_SPACE.search(raw) or _key_tokens(raw) != _keys(value):
        return parse_strict(raw)
    return value


_QUOTE_THEN_SPACE = re.compile(rb'"[ \t\n\r]')
_CONTAINERS = (dict, list)


def _key_tokens(raw: bytes) -> int:
    """How many ``":`` end a key: those whose quote is not escaped, i.e. after an even
    number of backslashes (counted by inclusion-exclusion over runs of backslashes)."""
    if b"\\" not in raw:  # the common case: one pass
        return raw.count(b'":')
    total, k, sign = 0, 0, 1
    while True:
        found = raw.count(b"\\" * k + b'":')
        if not found:
            return total
        total += sign * found
        sign, k = -sign, k + 1


def _keys(value: Any) -> int:
    """Object keys orjson kept, counting the top object, its objects, and lists of objects;
    keys deeper inside those are not counted, which only sends such a body to the strict
    parser."""
    t = type(value)
    if t is dict:
        return len(value) + sum(_keys(v) for v in value.values() if type(v) in _CONTAINERS)
    if t is list and value and type(value[0]) is dict:
        try:
            return sum(map(len, value))
        except TypeError:  # a later item has no length (null, a number): -1 matches no count
            return -1
    return 0


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_strict(raw: bytes) -> Any:
    """Python's parser: duplicate keys refused, ``NaN`` kept as a marker, faults located."""
    try:
        value = json.loads(raw, parse_constant=NonFinite, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        raise InvalidJSON(
            f"key {exc.args[0]!r} appears twice in one object", field="body"
        ) from None
    except json.JSONDecodeError as exc:
        raise InvalidJSON(
            f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", field="body"
        ) from None
    except UnicodeDecodeError:
        raise InvalidJSON("the body is not UTF-8 encoded JSON", field="body") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            # Python's own message tells the reader to call sys.set_int_max_str_digits().
            limit = sys.get_int_max_str_digits()
            raise InvalidJSON(f"a number has more than {limit} digits", field="body") from None
        raise InvalidJSON(f"unreadable JSON value: {exc}", field="body") from None
    except RecursionError:
        raise InvalidJSON("JSON nested too deeply", field="body") from None
    if _SURROGATE_ESCAPE.search(raw):
        _check_surrogates(value)
    return value


def _check_surrogates(value: Any) -> None:
    """Refuse a string holding half of a surrogate pair (``"\\ud800"`` alone): it is no
    character, so no UTF-8 text can hold it, and every echo of it (an error message, the
    audit trail, a log line) would fail to encode. orjson refuses these too."""
    try:
        json.dumps(value, ensure_ascii=False, default=repr).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJSON(
            "a string holds an unpaired surrogate escape (\\ud800-\\udfff); "
            "send text as UTF-8 or as escaped pairs",
            field="body",
        ) from None


async def json_body(request: Request, max_bytes: int) -> Any:
    head = BodyHeaders.of(request.scope["headers"])
    check_content_type(head.content_type)
    return parse_json(await read_body(request.stream(), head, max_bytes))
