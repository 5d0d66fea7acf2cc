"""``POST /predict``: rows in, the mixture's prediction, weights and uncertainty out."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.codecs import native
from app.rest.body import json_body
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
Infinity (send `null` for a missing value), an unknown category (422, unless
`IABMA_UNKNOWN_CATEGORY=missing`), an empty batch (422), more rows than
`IABMA_MAX_BATCH_ROWS` or a body over `IABMA_MAX_BODY_BYTES` (413), malformed JSON (400),
or a content type other than `application/json` (415).
"""


async def predict(request: Request) -> Response:
    # Not dependencies: see app/rest/routes/deps.py for what they cost on this route.
    service, ctx = service_of(request), context_of(request)
    model = service.runtime.require()
    with service.tracing.span("decode"):
        body = await json_body(request, service.settings.max_body_bytes)
        inference, opts = native.decode(body, model, service.settings.max_batch_rows)
    content = await service.infer(
        model, inference, ctx, lambda result: native.encode(result, opts, ctx.request_id)
    )
    return json_response(content)


def router() -> APIRouter:
    return router_of(("POST", "/predict", predict, DESCRIPTION))
