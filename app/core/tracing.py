"""OpenTelemetry tracing: off unless the standard ``OTEL_*`` variables ask for it.

When on, requests get a server span with ``decode``, ``graph`` and ``audit`` inside, and
the trace id goes into the log line; when off nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from typing import Any

from app.settings import SettingsError

log = logging.getLogger("iabma.tracing")
EXPORTERS = ("otlp", "console")
# Routes the HTTP instrumentation (app.main) leaves out: probes and scrapes.
UNTRACED = "livez,readyz,metrics,v2/health"
_OFF = contextlib.nullcontext()


def requested(env: Mapping[str, str]) -> str | None:
    """The exporter the environment asks for, or ``None`` when tracing stays off."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    named = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if named:
        if named == "none":
            return None
        if named not in EXPORTERS:
            raise SettingsError(
                f"OTEL_TRACES_EXPORTER: {named!r} is not supported; use one of {EXPORTERS}"
            )
        return named
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return "otlp" if endpoint else None


class Tracing:
    """The app's tracer, or nothing; ``span`` and ``trace_id`` work either way."""

    def __init__(self, exporter: str | None) -> None:
        self.exporter = exporter
        self.provider: Any = None
        self._tracer: Any = None
        self._trace_api: Any = None

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def start(self) -> None:
        """Set up the SDK; a no-op when tracing is off. The HTTP layer instruments its app
        with ``provider`` (the core stays free of HTTP)."""
        if self.exporter is None:
            return
        from opentelemetry import trace
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": "iabma"}).merge(OTELResourceDetector().detect())
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(self._make_exporter()))
        self._tracer = self.provider.get_tracer("iabma")
        self._trace_api = trace
        log.info("tracing on: spans go to the %s exporter", self.exporter)

    def _make_exporter(self) -> Any:
        if self.exporter == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            return ConsoleSpanExporter()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()

    def span(self, name: str) -> contextlib.AbstractContextManager[Any]:
        if self._tracer is None:
            return _OFF
        return self._tracer.start_as_current_span(name)

    def trace_id(self) -> str | None:
        """The current trace's id as 32 hex digits, or ``None``."""
        if self._trace_api is None:
            return None
        ctx = self._trace_api.get_current_span().get_span_context()
        return f"{ctx.trace_id:032x}" if ctx.is_valid else None

    def shutdown(self) -> None:
        """Send what is buffered; called when the server stops."""
        if self.provider is not None:
            self.provider.shutdown()


def from_environment() -> Tracing:
    return Tracing(requested(os.environ))
