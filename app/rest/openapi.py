"""``/openapi.json`` typed by the served bundle: FastAPI's document with the contract's
schemas named for the bundle, its features as query parameters, and every error status
each operation answers (:data:`ERRORS`); built once per served ``(name, version)``."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.contract.schema import Components, Schema, ref
from app.core.access import KeyRing, role_of
from app.core.context import REQUEST_ID
from app.core.nullable import valid_row
from app.core.runtime import LoadedModel
from app.core.service import Service
from app.rest.query import performance_parameters, weights_parameters
from app.rest.schemas import ANSWERS, STRING, components, oip_example

# Every status besides 200 that each operation can answer. Every operation can answer 400:
# an X-Request-ID header that is not a valid id is refused before routing.
ERRORS: dict[tuple[str, str], tuple[int, ...]] = {
    ("/predict", "post"): (400, 409, 413, 415, 422, 503),
    ("/weights", "get"): (400, 404, 410, 422, 503),
    ("/feedback", "post"): (400, 409, 413, 415, 422, 503),
    ("/performance", "get"): (400, 422, 503),
    ("/drift", "get"): (400, 503),
    ("/models", "get"): (400, 503),
    ("/readyz", "get"): (400, 503),
    ("/admin/reload", "post"): (400, 401, 404, 409),
    ("/v2/health/ready", "get"): (400, 503),
    ("/v2/models/{name}", "get"): (400, 404, 503),
    ("/v2/models/{name}/ready", "get"): (400, 404, 503),
    ("/v2/models/{name}/infer", "post"): (400, 404, 409, 413, 503),
}
OIP_PREFIX = "/v2"
# Bodies that are not the error schema: these answers say "not ready" in their own shape.
NOT_READY: dict[str, Schema] = {
    "/readyz": {"type": "object", "required": ["status"],
                "properties": {"status": {"enum": ["loading", "draining", "audit_unavailable"]},
                               "reason": STRING}},
    "/v2/health/ready": {"type": "object", "required": ["ready"],
                         "properties": {"ready": {"const": False}}},
    "/v2/models/{name}/ready": {"anyOf": [
        {"type": "object", "required": ["name", "ready"],
         "properties": {"name": STRING, "ready": {"const": False}}},
        ref("OipError"),
    ]},
}  # fmt: skip
STATIC_OK: dict[str, Schema] = {
    "/livez": {"type": "object", "properties": {"status": {"const": "alive"}}},
    "/readyz": {"type": "object", "required": ["status", "model", "version"],
                "properties": {"status": {"const": "ready"}, "model": STRING, "version": STRING}},
    "/v2": {"type": "object", "required": ["name", "version", "extensions"]},
    "/v2/health/live": {"type": "object", "properties": {"live": {"const": True}}},
    "/v2/health/ready": {"type": "object", "properties": {"ready": {"const": True}}},
    "/v2/models/{name}": {"type": "object", "required": ["name", "versions", "inputs", "outputs"]},
    "/v2/models/{name}/ready": {"type": "object", "required": ["name", "ready"],
                                "properties": {"name": STRING, "ready": {"const": True}}},
}  # fmt: skip
REQUEST_ID_HEADER: Schema = {
    "name": "X-Request-ID",
    "in": "header",
    "required": False,
    "description": "Your id for this request, echoed back and kept in the audit trail; "
    "a random one is made without it.",
    "schema": {"type": "string", "pattern": REQUEST_ID.pattern},
}

ECHOED_ID: Schema = {
    "description": "The request's id: the client's X-Request-ID, or the one made for it.",
    "schema": {"type": "string"},
}


def install(app: FastAPI, service: Service) -> Callable[[], dict[str, Any]]:
    """Make ``app.openapi`` build the typed document, cached per served (name, version)."""
    cache: dict[tuple[str, str] | None, dict[str, Any]] = {}
    lock = threading.Lock()

    def openapi() -> dict[str, Any]:
        model = service.runtime.current
        key = (model.name, model.version) if model is not None else None
        doc = cache.get(key)
        if doc is None:
            with lock:
                doc = cache.get(key)
                if doc is None:
                    ring = KeyRing.from_settings(service.settings)
                    doc = build(app, model, service.settings.max_batch_rows, ring)
                    cache.clear()  # only the version being served is ever asked for
                    cache[key] = doc
        return doc

    # FastAPI's documented way to serve a custom schema is to replace this method.
    app.openapi = openapi  # type: ignore[method-assign]
    return openapi


def build(
    app: FastAPI, model: LoadedModel | None, max_rows: int, ring: KeyRing | None = None
) -> dict[str, Any]:
    """FastAPI's document with each operation's errors, and with ``model``'s types."""
    doc = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        summary=app.summary,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
        servers=app.servers,
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    found, comps = components(model, max_rows)
    schemas.update(found)
    if model is not None:
        doc["info"]["x-bundle"] = {"name": model.name, "version": model.version}
    for path, method, op in operations(doc):
        op.setdefault("parameters", []).append(REQUEST_ID_HEADER)
        _typed(op, path, model, comps)
        _responses(op, path, method, ring or KeyRing({}))
    _prune(doc)
    return doc


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            yield path, method, op


def _json(schema: Schema, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def declared_errors(path: str, method: str, ring: KeyRing) -> list[int]:
    """The error statuses an operation answers: its own, and 401/403 when its role has keys."""
    statuses = set(ERRORS.get((path, method), (400,)))
    role = role_of(path)
    if role is not None and role in ring.keys:
        statuses |= {401, 403}
    return sorted(statuses)


def _responses(op: dict[str, Any], path: str, method: str, ring: KeyRing) -> None:
    """Declare exactly the statuses this operation answers, errors in their route's schema."""
    error = ref("OipError" if path.startswith(OIP_PREFIX) else "ErrorBody")
    ok = op["responses"].get("200", {"description": "OK"})
    if path in STATIC_OK:
        ok = _json(STATIC_OK[path], ok.get("description", "OK"))
    elif path == "/metrics":
        ok = {"description": "Prometheus text exposition.",
              "content": {"text/plain": {"schema": {"type": "string"}}}}  # fmt: skip
    out: dict[str, Any] = {"200": ok}
    for status in declared_errors(path, method, ring):
        if status == 503 and path in NOT_READY:
            out["503"] = _json(NOT_READY[path], "Not ready: loading, or draining after SIGTERM.")
        else:
            text = _ERROR_TEXT.get((path, status)) or _ERROR_TEXT.get(status, "Error")
            out[str(status)] = _json(error, text)
    for response in out.values():
        response["headers"] = {"X-Request-ID": ECHOED_ID}
    op["responses"] = out


_ERROR_TEXT: dict[Any, str] = {
    ("/feedback", 409): "An outcome differs from the one stored for its row; nothing stored.",
    ("/predict", 409): "The request id names an audited prediction of this model already.",
    ("/v2/models/{name}/infer", 409): "The request id names an audited prediction already.",
    400: "Bad request: malformed JSON, or a bad X-Request-ID header.",
    401: "Missing or unknown key (or admin token).",
    403: "A key of another role.",
    404: "Not found.",
    409: "The bundle failed verification; the serving version stays.",
    413: "Too large: the body or the number of rows.",
    415: "Not application/json, or a Content-Encoding other than gzip or deflate.",
    422: "Invalid input; the message names the field.",
    503: "Not ready, or the audit store is unavailable.",
}


def _typed(op: dict[str, Any], path: str, model: LoadedModel | None, comps: Components) -> None:
    """The contract's request and answer of each data route; ``model``'s examples, query
    parameters and OIP tensors when one is loaded."""
    if path in ANSWERS:
        answers = [comps.of(cls) for cls in ANSWERS[path]]
        schema = answers[0] if len(answers) == 1 else {"anyOf": answers}
        op["responses"]["200"] = _json(schema, _ANSWER_TEXT[path])
    if path == "/predict":
        examples: dict[str, Any] = {}
        if model is not None:
            row = valid_row(model)
            examples = {
                "rows": {"value": {"instances": [row]}},
                "columnar": {"value": {"instances": [row, row], "format": "columnar"}},
                "weights only": {"value": {"instances": [row], "include": ["weights"]}},
            }
        op["requestBody"] = {"required": True, "content": _body("PredictRequest", examples)}
    if path == "/feedback":
        examples = {}
        if model is not None:
            outcome = model.classes[0] if model.classes else 12.5
            item = {"request_id": "0192f3a1c4d2e8f00a1b", "row": 0, "outcome": outcome}
            examples = {"one outcome": {"value": {"outcomes": [item]}}}
        op["requestBody"] = {"required": True, "content": _body("FeedbackRequest", examples)}
    if path == "/performance":
        op["parameters"] = performance_parameters() + op["parameters"]
    if model is None:
        return
    if path == "/weights":
        op["parameters"] = weights_parameters(model) + op["parameters"]
    elif path == "/v2/models/{name}/infer":
        examples = {"one row": {"value": oip_example(model)}}
        op["requestBody"] = {"required": True, "content": _body("InferenceRequest", examples)}
    for param in op.get("parameters", []):
        if path.startswith(OIP_PREFIX) and param["in"] == "path" and param["name"] == "name":
            param["schema"] = {"type": "string", "enum": [model.name]}


_ANSWER_TEXT = {
    "/feedback": "How many outcomes were stored, and how many were there already.",
    "/performance": "Realised scores over the rows with outcomes.",
    "/drift": "Each feature's served values against the training rows.",
    "/predict": "The answer, per instance or columnar.",
    "/weights": "A record, the gate's weights, or a page.",
    "/admin/reload": "The version now served, and the one before.",
    "/v2/models/{name}/infer": "Output tensors.",
    "/models": "The served bundle: its manifest, less the file layout, and its rollout.",
}


def _body(name: str, examples: dict[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = {"schema": ref(name)}
    if examples:
        content["examples"] = examples
    return {"application/json": content}


_REF = re.compile(r"^#/components/schemas/(.+)$")


def _prune(doc: dict[str, Any]) -> None:
    """Drop component schemas nothing refers to any more (FastAPI's untyped ones)."""
    schemas = doc.get("components", {}).get("schemas", {})
    seen: set[str] = set()
    todo = [doc["paths"]]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            target = node.get("$ref")
            match = _REF.match(target) if isinstance(target, str) else None
            if match and match.group(1) not in seen and match.group(1) in schemas:
                seen.add(match.group(1))
                todo.append(schemas[match.group(1)])
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    for name in set(schemas) - seen:
        del schemas[name]
