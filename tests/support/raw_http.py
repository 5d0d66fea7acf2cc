"""One HTTP/1.1 request sent exactly as written: the target is not normalised (``/a/../b``,
``//b`` and ``%0A`` reach the server as they are), which httpx would not allow."""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]  # lower-case names; the last of repeated headers
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def raw_request(
    base_url: str,
    method: str,
    target: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = 30,
) -> RawResponse:
    """Send ``method target`` to the server at ``base_url`` on a connection of its own."""
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        response = conn.getresponse()
        content = response.read()
        found = {k.lower(): v for k, v in response.getheaders()}
        return RawResponse(response.status, found, content)
    finally:
        conn.close()
