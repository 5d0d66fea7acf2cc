"""The Open Inference Protocol over gRPC: ``inference.GRPCInferenceService`` and health.

Served beside the REST port, in the same process and on the same event loop, when
``IABMA_GRPC_PORT`` is set. Requests go through the same codec, data plane and audit
trail as ``POST /v2/models/{name}/infer``.
"""
