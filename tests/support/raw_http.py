"""HTTP/1.1 requests sent exactly as written: the target is not normalised (``/a/../b``,
``//b`` and ``%0A`` reach the server as they are), which httpx would not allow; and a body
streamed until the server answers, to show it refuses one before reading it whole."""

from __future__ import annotations

import http.client
import select
import socket
import time
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


def answer_to_head(
    base_url: str, method: str, target: str, headers: dict[str, str], timeout: float = 30
) -> RawResponse:
    """Send the request's head only (``headers`` declare a body, e.g. its Content-Length)
    and read the answer: one that comes refused the body without waiting for it."""
    parts = urlsplit(base_url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port), timeout) as sock:
        sock.sendall(_head(method, target, parts.netloc, headers))
        return _read_response(sock)


def _head(method: str, target: str, host: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def stream_until_answered(
    base_url: str,
    method: str,
    target: str,
    headers: dict[str, str],
    chunk: bytes,
    most: int,
    timeout: float = 30,
) -> tuple[RawResponse, int]:
    """Send a chunked body of ``chunk`` after ``chunk``, never its last chunk, until the
    server answers (or ``most`` bytes are sent); the answer and the bytes sent by then.

    A server that reads the whole body before refusing it never answers here.
    """
    parts = urlsplit(base_url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port), timeout) as sock:
        chunked = {"Transfer-Encoding": "chunked", **headers}
        sock.sendall(_head(method, target, parts.netloc, chunked))
        framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        sent = 0
        deadline = time.monotonic() + timeout
        while sent < most and time.monotonic() < deadline:
            readable, _w, _x = select.select([sock], [], [], 0)
            if readable:
                break
            try:
                sock.sendall(framed)
            except (BrokenPipeError, ConnectionResetError):
                break  # the server answered and closed: read what it said
            sent += len(chunk)
        select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        return _read_response(sock), sent


def _read_response(sock: socket.socket) -> RawResponse:
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        if not more:
            break
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    found = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    length = int(found.get("content-length", "0"))
    while len(rest) < length:
        more = sock.recv(65536)
        if not more:
            break
        rest += more
    return RawResponse(status, found, rest[:length])
