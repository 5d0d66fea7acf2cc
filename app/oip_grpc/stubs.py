"""The protoc-generated modules, imported in one place so that a missing build says so.

setup.py generates them from the ``.proto`` files beside this one when the package is
installed; a source tree that was never installed has none.
"""

from __future__ import annotations

from typing import Any

try:
    # protoc's modules build their classes at import time, which a type checker cannot
    # see: they are typed as Any here, their one point of entry.
    from app.oip_grpc import grpc_service_pb2 as _pb
    from app.oip_grpc import grpc_service_pb2_grpc as _pb_grpc
    from app.oip_grpc import health_pb2 as _health_pb2
    from app.oip_grpc import health_pb2_grpc as _health_pb2_grpc
except ImportError as exc:  # pragma: no cover - depends on how the package was installed
    raise ImportError(
        "the gRPC stubs of app/oip_grpc are not built; install the package "
        "(pip install -e . or pip install .) to generate them from the .proto files: "
        f"{exc}"
    ) from exc

pb: Any = _pb
pb_grpc: Any = _pb_grpc
health_pb2: Any = _health_pb2
health_pb2_grpc: Any = _health_pb2_grpc

__all__ = ["health_pb2", "health_pb2_grpc", "pb", "pb_grpc"]
