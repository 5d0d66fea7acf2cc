"""uvicorn's httptools protocol, with each response leaving in one write.

uvicorn writes a response's head and its body as two ``transport.write`` calls: two
``send`` system calls and two TCP segments for every single-row answer. Under wrk at 32
connections those two calls were a quarter of the samples that held the GIL
(docs/design.md, "The request path"). Here the writes made in one turn of the event loop
are joined and leave together at the end of that turn; closing or aborting the
connection sends what is pending first (abort drops it, as a real abort does).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _Coalescing:
    """A transport whose writes within one loop turn reach the real one as one write."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:  # everything else is the transport's own
        return getattr(self._transport, name)


class HttpProtocol(HttpToolsProtocol):
    """What ``app.server`` runs: uvicorn's httptools protocol on a coalescing transport."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        coalescing = _Coalescing(cast(asyncio.Transport, transport), self.loop)
        super().connection_made(cast(asyncio.Transport, coalescing))
