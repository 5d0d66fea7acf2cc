"""The same keys on gRPC as on REST: a server interceptor in front of every method.

``ModelInfer``, ``ModelMetadata`` and ``ServerMetadata`` belong to the data role, like
their REST routes; liveness, readiness and the health service stay open for probes. The
key travels as ``authorization: Bearer <key>`` or ``x-api-key: <key>`` metadata. A
missing or unknown key is ``UNAUTHENTICATED``, a key of another role ``PERMISSION_DENIED``,
with the message REST would give.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from app.core.access import KeyRing, Role, presented_key
from app.errors import Forbidden, Unauthorized, grpc_code

_SERVICE = "/inference.GRPCInferenceService/"
DATA_METHODS = frozenset(_SERVICE + m for m in ("ModelInfer", "ModelMetadata", "ServerMetadata"))


class KeyInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        if details.method not in DATA_METHODS or Role.DATA not in self.ring.keys:
            return await continuation(details)
        headers = [
            (k.encode("latin-1"), v.encode("latin-1") if isinstance(v, str) else v)
            for k, v in (details.invocation_metadata or ())
        ]
        try:
            self.ring.check(Role.DATA, presented_key(headers))
        except (Unauthorized, Forbidden) as exc:
            return _refusal(grpc.StatusCode[grpc_code(exc)], exc.fault.text())
        return await continuation(details)


def _refusal(code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    return grpc.unary_unary_rpc_method_handler(refuse)
