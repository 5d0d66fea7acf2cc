"""``iabma serve``: run the HTTP app on a bundle."""

from __future__ import annotations

import argparse
import os
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve a bundle over HTTP")
    p.add_argument(
        "--store",
        default=None,
        help="bundle store directory (default: IABMA_STORE, else models_store)",
    )
    p.add_argument(
        "--name", default=None, help="bundle name (default: IABMA_MODEL_NAME, else demo)"
    )
    p.add_argument(
        "--version",
        default=None,
        help="pin a version instead of LATEST (default: IABMA_MODEL_VERSION)",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=None, help="default: IABMA_WORKERS (1)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Settings travel as IABMA_* variables so that every uvicorn worker process builds
    # the same Settings through create_app, exactly as in the container; a flag given
    # overrides the variable, and one not given leaves it (or the setting's default).
    flags = {
        "IABMA_STORE": args.store,
        "IABMA_MODEL_NAME": args.name,
        "IABMA_MODEL_VERSION": args.version,
    }
    for name, value in flags.items():
        if value is not None:
            os.environ[name] = str(value)
    from app.server import serve

    return serve(host=args.host, port=args.port, workers=args.workers)
