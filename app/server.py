"""Run the server: ``python -m app.server`` (the image's CMD) and ``iabma serve``.

uvicorn gets the factory's import string rather than an app object so that several
worker processes (``IABMA_WORKERS``, or ``--workers``) can each build the same app from
the ``IABMA_*`` environment. The settings are validated here first, so a bad one stops
the server with one line naming the variable, before any worker starts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app.settings import SettingsError, load_settings

FACTORY = "app.main:create_app"
# uvicorn's httptools protocol with each response in one write (app/rest/wire.py).
HTTP_PROTOCOL = "app.rest.wire:HttpProtocol"


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int | None = None,
    *,
    proxy_headers: bool = False,
    keep_alive_seconds: int = 5,
    graceful_seconds: float = 30,
    root_path: str = "",
) -> int:
    """Run until stopped; return the process exit code (2 for a bad setting)."""
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"iabma serve: error: {exc}", file=sys.stderr)
        return 2
    given = f"--workers {workers}" if workers is not None else f"IABMA_WORKERS={settings.workers}"
    workers = settings.workers if workers is None else workers
    if workers < 1:
        print(f"iabma serve: error: --workers must be at least 1, got {workers}", file=sys.stderr)
        return 2
    if workers > 1 and settings.audit_enabled and settings.audit_url.startswith("sqlite"):
        print(
            f"iabma serve: error: {given} with a SQLite audit trail "
            f"({settings.audit_url}): SQLite serves one process. Run one worker, or give the "
            "workers one PostgreSQL trail (IABMA_AUDIT_URL=postgresql+psycopg://...)",
            file=sys.stderr,
        )
        return 2
    import uvicorn

    from app.core.logs import uvicorn_log_config

    uvicorn.run(
        FACTORY,
        factory=True,
        http=HTTP_PROTOCOL,
        host=host,
        port=port,
        workers=workers,
        access_log=False,
        log_config=uvicorn_log_config(settings),
        proxy_headers=proxy_headers,
        timeout_keep_alive=keep_alive_seconds,
        timeout_graceful_shutdown=int(graceful_seconds),
        root_path=root_path,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m app.server", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=None, help="default: IABMA_WORKERS (1)")
    p.add_argument(
        "--proxy-headers",
        action="store_true",
        help="believe X-Forwarded-* from the addresses in FORWARDED_ALLOW_IPS",
    )
    p.add_argument(
        "--root-path",
        default="",
        metavar="PREFIX",
        help="the path prefix a proxy mounts the service under and strips, e.g. /api",
    )
    p.add_argument("--timeout-keep-alive", type=int, default=5, metavar="SECONDS")
    p.add_argument("--timeout-graceful-shutdown", type=float, default=30, metavar="SECONDS")
    args = p.parse_args(argv)
    return serve(
        args.host,
        args.port,
        args.workers,
        proxy_headers=args.proxy_headers,
        keep_alive_seconds=args.timeout_keep_alive,
        graceful_seconds=args.timeout_graceful_shutdown,
        root_path=args.root_path,
    )


if __name__ == "__main__":
    sys.exit(main())
