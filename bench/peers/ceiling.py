"""The ceilings of this machine's Python serving stack, started as one process.

- HTTP: an ASGI app that answers every request with a fixed 11-byte JSON body, on uvicorn
  with uvloop and httptools and no access log, as ours and the bare peer run.
- gRPC: an OIP ``ModelInfer`` handler that returns a fixed response, on ``grpc.aio`` in
  the same event loop, as ours serves gRPC.

No server that does any work per request can go faster, so the report sets the
throughput targets against them: a target above a ceiling cannot be met by any server on
this machine. ``GET /calls`` answers how many gRPC calls were served, for the load
generator's success count.

    python -m bench.peers.ceiling HTTP_PORT GRPC_PORT
"""

from __future__ import annotations

import sys
from typing import Any

import grpc
import uvicorn
import uvloop

from app.oip_grpc.stubs import pb, pb_grpc

BODY = b'{"ok":true}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"11")]
_calls = 0


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    body, headers = BODY, HEADERS
    if scope["path"] == "/calls":
        body = str(_calls).encode()
        headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Trivial(pb_grpc.GRPCInferenceServiceServicer):
    response = pb.ModelInferResponse(model_name="ceiling", model_version="1")

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        global _calls
        _calls += 1
        return self.response


async def serve(http_port: int, grpc_port: int) -> None:
    server = grpc.aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(_Trivial(), server)
    server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await server.start()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=http_port, access_log=False, log_level="warning"
    )
    try:
        await uvicorn.Server(config).serve()
    finally:
        await server.stop(0)


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), int(sys.argv[2])))
