"""The coalescing transport under uvicorn's protocol: a response's writes leave as one,
in order, and closing sends what is pending first. The transport below it is a recorder
standing in for uvloop's (not our code)."""

from __future__ import annotations

import asyncio

from app.rest.wire import _Coalescing


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def close(self) -> None:
        self.calls.append(("close", b""))
        self.closing = True

    def abort(self) -> None:
        self.calls.append(("abort", b""))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> str:
        return f"info {name}"


def test_writes_in_one_turn_leave_as_one_and_close_flushes_first() -> None:
    async def scenario() -> list[tuple[str, bytes]]:
        real = Recorder()
        t = _Coalescing(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t.write(b"body")
        assert real.calls == []  # nothing leaves before the turn ends
        await asyncio.sleep(0)
        t.write(b"next")
        await asyncio.sleep(0)
        t.write(b"last")
        t.close()
        assert t.get_extra_info("peername") == "info peername"  # the rest passes through
        await asyncio.sleep(0)
        return real.calls

    calls = asyncio.run(scenario())
    assert calls == [("write", b"HTTP/1.1 200 OK\r\n\r\nbody"), ("write", b"next"),
                     ("write", b"last"), ("close", b"")]  # fmt: skip


def test_an_abort_drops_what_is_pending_and_nothing_is_written_after() -> None:
    async def scenario() -> list[tuple[str, bytes]]:
        real = Recorder()
        t = _Coalescing(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        t.write(b"lost")
        t.abort()
        await asyncio.sleep(0)
        return real.calls

    assert asyncio.run(scenario()) == [("abort", b"")]
