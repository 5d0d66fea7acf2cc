"""A Python client for the IA-BMA service: ``Client`` (blocking) and ``AsyncClient``.

Needs only httpx (``pip install 'iabma[client]'``); pandas, numpy and pyarrow are used
when a caller passes or asks for their objects. Answers come back as frozen dataclasses
(:mod:`app.client.results`), errors as :class:`ClientError` subclasses that carry the
service's ``status``, ``code``, ``message`` and ``field``.

    from app.client import Client

    with Client("http://127.0.0.1:8000", api_key="...") as client:
        result = client.predict([{"x1": 0.5, "x2": -1.0}])
        print(result.predictions[0].prediction, result.predictions[0].weights)
"""

from app.client.aio import AsyncClient
from app.client.columnar import ColumnarResult
from app.client.core import NO_RETRY, RetryPolicy
from app.client.errors import (
    AuthenticationError,
    BadRequest,
    ClientError,
    Conflict,
    ConnectionFailed,
    FieldError,
    HTTPError,
    InvalidInput,
    InvalidResponse,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    ServerError,
    ServiceUnavailable,
    UnsupportedMediaType,
)
from app.client.results import (
    AuditRecord,
    ClassPrediction,
    FeedbackResult,
    GateWeights,
    InstanceResult,
    ModelInfo,
    Performance,
    PredictResult,
    RecordPage,
    RegressionPrediction,
)
from app.client.sync import Client

__all__ = [
    "NO_RETRY",
    "AsyncClient",
    "AuditRecord",
    "AuthenticationError",
    "BadRequest",
    "ClassPrediction",
    "Client",
    "ClientError",
    "ColumnarResult",
    "Conflict",
    "ConnectionFailed",
    "FeedbackResult",
    "FieldError",
    "GateWeights",
    "HTTPError",
    "InstanceResult",
    "InvalidInput",
    "InvalidResponse",
    "ModelInfo",
    "NotFound",
    "PayloadTooLarge",
    "Performance",
    "PermissionDenied",
    "PredictResult",
    "RecordPage",
    "RegressionPrediction",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailable",
    "UnsupportedMediaType",
]
