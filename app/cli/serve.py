"""``iabma serve``: run the HTTP app on a bundle."""

from __future__ import annotations

import argparse
import os
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve a bundle over HTTP")
    p.add_argument("--store", default="models_store", help="bundle store directory")
    p.add_argument("--name", default="demo", help="bundle name")
    p.add_argument("--version", default=None, help="pin a version instead of LATEST")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=None, help="default: IABMA_WORKERS (1)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Settings travel as IABMA_* variables so that every uvicorn worker process builds
    # the same Settings through create_app, exactly as in the container.
    os.environ["IABMA_STORE"] = str(args.store)
    os.environ["IABMA_MODEL_NAME"] = args.name
    if args.version:
        os.environ["IABMA_MODEL_VERSION"] = args.version
    from app.server import serve

    return serve(host=args.host, port=args.port, workers=args.workers)
