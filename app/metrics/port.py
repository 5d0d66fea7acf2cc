"""``IABMA_METRICS_PORT``: the metrics on a port of their own, away from the data routes.
The first worker to bind it serves every worker's values from the shared files."""

from __future__ import annotations

import errno
import logging
from typing import Any

from prometheus_client import CollectorRegistry

log = logging.getLogger("iabma.metrics")


class MetricsPort:
    """The listener of one worker, or nothing when another worker holds the port."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._server: Any = None

    def start(self) -> bool:
        """Bind and serve in a daemon thread; ``False`` when another worker has the port."""
        from prometheus_client.exposition import start_wsgi_server

        try:
            self._server, _thread = start_wsgi_server(self.port, self.host, self.registry)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            log.debug("metrics port %d is held by another worker", self.port)
            return False
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)
        return True

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
