"""Two ways to talk to a real app: Starlette's TestClient, and uvicorn on 127.0.0.1.

Both run the app's lifespan (bundle load, audit trail) on their own event loop thread and
offer the same synchronous ``get``/``post``/``request`` methods, so one test body can be
run through both transports. :class:`UvicornProcess` runs the app in a child process the
way the container does (``uvicorn app.main:create_app --factory``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from starlette.testclient import TestClient

from app.core.service import Service
from app.main import create_app
from app.server import HTTP_PROTOCOL
from app.settings import Settings
from tests.support.services import free_port, wait_until_ok

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


class AsgiHarness:
    """The app in this process through Starlette's ``TestClient``, with its lifespan running
    (unless ``lifespan=False``) on the client's event loop thread."""

    kind = "asgi"

    def __init__(self, settings: Settings, lifespan: bool = True) -> None:
        self.app: FastAPI = create_app(settings)
        self._lifespan = lifespan
        self.base_url = "http://testserver"
        self.client = TestClient(self.app, base_url=self.base_url)

    @property
    def service(self) -> Service:
        return self.app.state.service

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 60) -> Any:
        """Await ``coro`` on the app's event loop, e.g. concurrent requests through an
        ASGI transport."""

        async def bounded() -> Any:
            return await asyncio.wait_for(coro, timeout)

        return self.client.portal.call(bounded)

    def __enter__(self) -> AsgiHarness:
        if self._lifespan:
            self.client.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._lifespan:
            self.client.__exit__(*exc)
        self.client.close()

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        return self.client.request(method, url, **kw)

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("POST", url, **kw)


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class UvicornHarness:
    """The app served by uvicorn on 127.0.0.1 from a thread of this process; ``root_path``
    is uvicorn's ``--root-path``."""

    kind = "uvicorn"

    def __init__(self, settings: Settings, root_path: str = "") -> None:
        self.app: FastAPI = create_app(settings)
        self._sock = free_socket()
        port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(
            self.app,
            http=HTTP_PROTOCOL,
            log_config=None,
            access_log=False,
            lifespan="on",
            root_path=root_path,
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def service(self) -> Service:
        return self.app.state.service

    def __enter__(self) -> UvicornHarness:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start; see the log above")
            time.sleep(0.02)
        self.client = httpx.Client(base_url=self.base_url, timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.server.should_exit = True
        self._thread.join(30)
        self._sock.close()

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        return self.client.request(method, url, **kw)

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("POST", url, **kw)


def harness(kind: str, settings: Settings) -> AsgiHarness | UvicornHarness:
    return AsgiHarness(settings) if kind == "asgi" else UvicornHarness(settings)


class UvicornProcess:
    """``uvicorn app.main:create_app --factory`` (or any argv) as a child process."""

    def __init__(
        self,
        env: dict[str, str],
        extra_args: tuple[str, ...] = (),
        cwd: Path = ROOT,
        argv: Callable[[int], list[str]] | None = None,
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.argv = argv(self.port) if argv else [
            PYTHON, "-m", "uvicorn", "app.main:create_app", "--factory",
            "--host", "127.0.0.1", "--port", str(self.port), *extra_args,
        ]  # fmt: skip
        # An app built in this process set PROMETHEUS_MULTIPROC_DIR to this process's
        # metrics directory; a server of its own must not write into it.
        full_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("IABMA_") and k != "PROMETHEUS_MULTIPROC_DIR"
        }
        full_env.update(env)
        full_env["PYTHONPATH"] = str(ROOT)
        # Files, not pipes: a server logs a line per request, and a pipe nobody reads fills
        # after 64 KiB, blocks the workers' event loops, and uvicorn's supervisor then
        # restarts them as unresponsive, cutting every open connection.
        self._out = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115
        self._err = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.argv,
            cwd=cwd,
            env=full_env,
            stdout=self._out,
            stderr=self._err,
            text=True,
            # Its own process group, so uvicorn's worker children go with it even when the
            # parent dies first.
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 60) -> None:
        def exited() -> str | None:
            if self.proc.poll() is None:
                return None
            out, err = self.output()
            return f"exit code {self.proc.returncode}:\n{err}\n{out}"

        wait_until_ok(self.base_url + "/readyz", exited, timeout)

    def terminate(self, timeout: float = 30) -> tuple[int, str, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=timeout)
        out, err = self.output()
        return self.proc.returncode, out, err

    def output(self) -> tuple[str, str]:
        """What the server has written so far to stdout and to stderr."""
        texts = []
        for f in (self._out, self._err):
            f.flush()
            f.seek(0)
            texts.append(f.read())
            f.seek(0, os.SEEK_END)
        return texts[0], texts[1]

    def __enter__(self) -> UvicornProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.returncode is None:
            self.proc.wait(timeout=10)
        self._out.close()
        self._err.close()
