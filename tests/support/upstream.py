"""A real HTTP server in front of the real app that fails on cue: the client's flaky upstream.

``FlakyProxy`` answers the first requests with the statuses it is given (503 with a native
error body, optionally ``Retry-After``), then relays every request to the app unchanged
except that a gzip body is decoded first (as a proxy that inflates bodies would). Every
request it saw is kept, with its headers and decoded body, for the tests to inspect.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

HOP_BY_HOP = {"connection", "transfer-encoding", "keep-alive", "content-length", "host"}


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: bytes  # decoded when it came gzip-encoded


class FlakyProxy:
    def __init__(
        self, upstream: str | None, failures: list[int], retry_after: str | None = None
    ) -> None:
        self.upstream = upstream
        self.failures = list(failures)
        self.retry_after = retry_after
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def _serve(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                body = gzip.decompress(raw) if headers.get("content-encoding") == "gzip" else raw
                with proxy._lock:
                    proxy.seen.append(Seen(self.command, self.path, headers, raw, body))
                    failure = proxy.failures.pop(0) if proxy.failures else None
                if failure is not None or proxy.upstream is None:
                    self._fail(failure or 503)
                    return
                forward = {k: v for k, v in headers.items() if k not in HOP_BY_HOP}
                forward.pop("content-encoding", None)
                r = httpx.request(
                    self.command, proxy.upstream + self.path, headers=forward, content=body,
                    timeout=30,
                )  # fmt: skip
                self._send(r.status_code, r.content, dict(r.headers))

            def _fail(self, status: int) -> None:
                error = {"code": "not_ready", "message": "flaky upstream", "field": "model"}
                extra = {"retry-after": proxy.retry_after} if proxy.retry_after else {}
                self._send(status, json.dumps({"error": error}).encode(), extra)

            def _send(self, status: int, content: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in HOP_BY_HOP and k.lower() != "content-encoding":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = _serve

        return Handler

    @contextmanager
    def running(self) -> Iterator[FlakyProxy]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            thread.join(10)
