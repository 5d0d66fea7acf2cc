"""``POST /predict``: rows in, the mixture's prediction, weights and uncertainty out."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.rest.body import BodyHeaders
from app.rest.dataplane import predict_answer
from app.rest.responses import json_response
from app.rest.routes import router_of
from app.rest.routes.deps import context_of, service_of

DESCRIPTION = """
The bundle's fused graph runs once for the whole batch. Per instance the answer holds the
prediction (a label with class probabilities, or a mean with std and a 90% interval), the
gate's `weights` per expert, each expert's own prediction, and the `uncertainty` split
(total, aleatoric, epistemic, selection). Batch clients can ask for `"format": "columnar"`
(one array per field) and for fewer parts with `"include"` (e.g. `["prediction",
"weights"]` leaves out the experts' own predictions). The response is sent only after its audit
record is committed (503 if the audit store is unavailable).

Bad input is a 4xx naming the field: a missing or unknown feature, a wrong type, NaN or
Infinity (send `null` for a missing value), a number beyond float32's range, an unknown
category (422, unless `IABMA_UNKNOWN_CATEGORY=missing`), an empty batch (422), more rows
than `IABMA_MAX_BATCH_ROWS` or a body over `IABMA_MAX_BODY_BYTES` (413), malformed JSON
(400), or a content type other than `application/json` (415). An `X-Request-ID` that
already names an audited prediction of this model is refused with 409, and nothing is
recorded: a request id names one record.
"""


async def predict(request: Request) -> Response:
    # Reached only past the front middleware, which answers this route itself
    # (app/rest/dataplane.py); kept for the OpenAPI document and any other mount.
    head = BodyHeaders.of(request.scope["headers"])
    service, ctx = service_of(request), context_of(request)
    return json_response(await predict_answer(service, ctx, head, request.stream()))


def router() -> APIRouter:
    return router_of(("POST", "/predict", predict, DESCRIPTION))
