"""Reading a JSON request body: content type, size limit, and strict parsing.

The body is parsed by our own code rather than FastAPI's so that every fault becomes a
clear 4xx: a wrong ``Content-Type`` is 415, a body over ``IABMA_MAX_BODY_BYTES`` is 413
(refused from ``Content-Length`` before reading, or as soon as a chunked body passes the
limit), and malformed JSON is 400 with the line and column. ``NaN`` and ``Infinity``
tokens are kept as :class:`NonFinite` markers so that the field that holds one can be
named by the validator; a duplicate key in an object is refused outright.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from app.errors import InvalidJSON, PayloadTooLarge, UnsupportedMediaType


class NonFinite:
    """A ``NaN``, ``Infinity`` or ``-Infinity`` token found in the body."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token

    def __repr__(self) -> str:
        return self.token


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


def check_content_type(request: Request) -> None:
    raw = request.headers.get("content-type")
    media = (raw or "").split(";", 1)[0].strip().lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return
    got = repr(raw) if raw else "none"
    raise UnsupportedMediaType(f"expected application/json, got {got}", field="header Content-Type")


async def read_body(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(
            f"{int(declared)} bytes exceed the limit of {max_bytes} (IABMA_MAX_BODY_BYTES)",
            field="body",
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(
                f"more than {max_bytes} bytes (IABMA_MAX_BODY_BYTES)", field="body"
            )
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(raw: bytes) -> Any:
    if not raw.strip():
        raise InvalidJSON("empty body; expected a JSON object", field="body")
    try:
        return json.loads(raw, parse_constant=NonFinite, object_pairs_hook=_no_duplicates)
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
    except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
        raise InvalidJSON(f"unreadable JSON value: {exc}", field="body") from None
    except RecursionError:
        raise InvalidJSON("JSON nested too deeply", field="body") from None


async def json_body(request: Request, max_bytes: int) -> Any:
    check_content_type(request)
    return parse_json(await read_body(request, max_bytes))
