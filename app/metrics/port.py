"""``IABMA_METRICS_PORT``: the metrics on a port of their own, away from the data routes.
The first worker to bind it serves every worker's values from the shared files.

The port answers ``GET /metrics`` only, with the metrics keys
(``IABMA_METRICS_KEYS``) the main port's ``/metrics`` takes: the drift of the gate's
weights and each expert's realised loss are the business's own figures. It binds
``IABMA_METRICS_HOST``, loopback unless told otherwise.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import make_wsgi_app

from app.errors import (
    MethodNotAllowed,
    NotFound,
    ServingError,
    Unauthorized,
    native_body,
    status_of,
)

log = logging.getLogger("iabma.metrics")
PATH = "/metrics"
# Raises Unauthorized or Forbidden unless the request's headers carry a metrics key.
Authorise = Callable[[list[tuple[bytes, bytes]]], None]
StartResponse = Callable[[str, list[tuple[str, str]]], Any]
_REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed"}


class MetricsPort:
    """The listener of one worker, or nothing when another worker holds the port;
    ``authorise`` None: the port is open (no metrics keys are set)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        authorise: Authorise | None = None,
    ) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.authorise = authorise
        self._metrics = make_wsgi_app(registry)
        self._server: WSGIServer | None = None

    def start(self) -> bool:
        """Bind and serve in a daemon thread; ``False`` when another worker has the port."""
        server_class = type("_Server", (_Server,), {"address_family": _family(self.host)})
        try:
            server: WSGIServer = make_server(
                self.host, self.port, self.app, server_class, handler_class=_QuietHandler
            )
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            log.debug("metrics port %d is held by another worker", self.port)
            return False
        self._server = server
        thread = threading.Thread(target=server.serve_forever, name="iabma-metrics", daemon=True)
        thread.start()
        log.info("metrics on http://%s:%d%s", self.host, self.port, PATH)
        if self.authorise is None and not _loopback(self.host):
            log.warning(
                "the metrics port listens on %s without IABMA_METRICS_KEYS: anyone who can "
                "reach it reads the drift and each expert's realised loss",
                self.host,
            )
        return True

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """The WSGI application: the key, the path and the method, then the exposition."""
        try:
            if self.authorise is not None:
                self.authorise(_headers(environ))
            if environ.get("PATH_INFO") != PATH:
                raise NotFound(f"no such route: {environ.get('PATH_INFO')}", "path")
            if environ["REQUEST_METHOD"] != "GET":
                raise MethodNotAllowed(f"{environ['REQUEST_METHOD']} is not allowed", "method")
        except ServingError as exc:
            status = status_of(exc)
            body = json.dumps(native_body(exc)).encode()
            headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
            if isinstance(exc, Unauthorized):
                headers.append(("WWW-Authenticate", "Bearer"))
            if isinstance(exc, MethodNotAllowed):
                headers.append(("Allow", "GET"))  # RFC 9110: a 405 names what is taken
            start_response(f"{status} {_REASONS.get(status, 'Error')}", headers)
            return [body]
        answer: Iterable[bytes] = self._metrics(environ, start_response)
        return answer


def _headers(environ: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    """The request's headers as ASGI lists them, from WSGI's ``HTTP_*`` keys."""
    return [
        (key[5:].replace("_", "-").lower().encode("latin-1"), str(value).encode("latin-1"))
        for key, value in environ.items()
        if key.startswith("HTTP_")
    ]


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:  # a name: the first address it resolves to
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No line per scrape on stderr: the main port's access log is the one kept."""

    def log_message(self, format: str, *args: Any) -> None:
        pass
