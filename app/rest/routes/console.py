"""``/audit``: the auditors' console, server-rendered pages over :mod:`app.console`.

Read-only: every page reads the audit trail, the served bundle or the store, and the one
POST that computes something (``/audit/probe``) runs the gate without recording anything.
The access guard keeps every page but the login form and the static files behind the
auditor role.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response
from starlette.types import Scope

from app.console import charts, pages, views
from app.console import probe as probing
from app.core.access import KeyRing, Role, presented_key
from app.core.runtime import LoadedModel
from app.core.service import Service
from app.errors import Fault, Forbidden, InvalidInput, NotFound, ServingError, Unauthorized
from app.rest.responses import json_response
from app.rest.routes.deps import ServiceDep

MAX_FORM_BYTES = 64 * 1024
# A page's context from the query (app.console.views).
View = Callable[[Service, LoadedModel, Mapping[str, str]], Awaitable[dict[str, Any]]]


def _base(model: LoadedModel, page: str, request: Request) -> dict[str, Any]:
    return {
        "page": page,
        "model": model,
        "root": pages.root_of(request.scope),
        "signed_in": presented_key(request.scope["headers"], "/audit") is not None,
    }


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise InvalidInput([Fault("invalid_value", "body", "the form is too large")])
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


async def _view(request: Request, service: Service, page: str, view: View) -> Response:
    """The page ``page``.html from ``view``'s context; a fault in the query, the error page."""
    model = service.runtime.require()
    base = _base(model, page, request)
    try:
        context = await view(service, model, request.query_params)
    except ServingError as exc:
        return pages.error_page(exc, base)
    return pages.render(f"{page}.html", {**base, **context})


async def decisions(request: Request, service: ServiceDep) -> Response:
    return await _view(request, service, "decisions", views.decisions)


async def record(request: Request, service: ServiceDep) -> Response:
    model = service.runtime.require()
    base = _base(model, "record", request)
    rid = request.query_params.get("request_id", "")
    found = await views.record(service, rid) if rid else None
    if found is None:
        exc = NotFound(f"no audit record with request id {rid!r}", field="request_id")
        return pages.error_page(exc, base)
    return pages.render("record.html", {**base, "record": found, "experts": model.experts})


async def timeline(request: Request, service: ServiceDep) -> Response:
    return await _view(request, service, "timeline", views.timeline)


async def timeline_json(request: Request, service: ServiceDep) -> Response:
    model = service.runtime.require()
    context = await views.timeline(service, model, request.query_params)
    return json_response({"timeline": context["data"], "version_changes": context["changes"]})


async def performance(request: Request, service: ServiceDep) -> Response:
    return await _view(request, service, "performance", views.performance)


async def probe_form(request: Request, service: ServiceDep) -> Response:
    model = service.runtime.require()
    return pages.render("probe.html", {**_base(model, "probe", request), "values": {}})


async def probe(request: Request, service: ServiceDep) -> Response:
    model = service.runtime.require()
    base = _base(model, "probe", request)
    form = await _form(request)
    values = probing.form_values(form, model)
    sweep_feature = form.get("sweep", "")
    context: dict[str, Any] = {**base, "values": values, "sweep_feature": sweep_feature}
    try:
        context["result"] = probing.probe(model, values)
        if sweep_feature:
            swept = probing.sweep(model, values, sweep_feature)
            context["sweep"] = swept
            context["sweep_chart"] = charts.line_chart(
                swept.x, dict(swept.weights), [f"{x:.4g}" for x in swept.x]
            )
    except ServingError as exc:
        context["faults"] = exc.faults
        return pages.render("probe.html", context, 422)
    return pages.render("probe.html", context)


async def bundle(request: Request, service: ServiceDep) -> Response:
    model = service.runtime.require()
    context = views.bundle(service, model)
    return pages.render("bundle.html", {**_base(model, "bundle", request), **context})


async def login_form(request: Request) -> Response:
    return pages.login_page(None, request.scope)


async def login(request: Request, service: ServiceDep) -> Response:
    """Check the key once and keep it in the console's cookie; a refused key sets none."""
    key = (await _form(request)).get("key", "").strip()
    try:
        KeyRing.from_settings(service.settings).check(Role.AUDITOR, key or None)
    except (Unauthorized, Forbidden) as exc:
        return refusal_page(exc, request.scope)
    root = pages.root_of(request.scope)
    response = RedirectResponse(f"{root}/audit", status_code=303)
    if key:
        secure = request.url.scheme == "https" or (
            request.headers.get("x-forwarded-proto") == "https"
        )
        pages.set_cookie(response, key, secure, root)
    return response


async def logout(request: Request) -> Response:
    root = pages.root_of(request.scope)
    response = RedirectResponse(f"{root}/audit/login", status_code=303)
    pages.clear_cookie(response, root)
    return response


async def static(name: str) -> Response:
    found = pages.static_file(name)
    if found is None:
        raise NotFound(f"no console file {name!r}", field="path")
    return found


def refusal_page(exc: Exception, scope: Scope) -> Response:
    """The guard's answer to a browser without a valid key: the login form, same status."""
    assert isinstance(exc, ServingError)
    return pages.login_page(exc, scope, 401 if isinstance(exc, Unauthorized) else 403)


def router() -> APIRouter:
    r = APIRouter(include_in_schema=False)
    r.add_api_route("/audit", decisions, methods=["GET"])
    r.add_api_route("/audit/record", record, methods=["GET"])
    r.add_api_route("/audit/timeline", timeline, methods=["GET"])
    r.add_api_route("/audit/timeline.json", timeline_json, methods=["GET"])
    r.add_api_route("/audit/performance", performance, methods=["GET"])
    r.add_api_route("/audit/probe", probe_form, methods=["GET"])
    r.add_api_route("/audit/probe", probe, methods=["POST"])
    r.add_api_route("/audit/bundle", bundle, methods=["GET"])
    r.add_api_route("/audit/login", login_form, methods=["GET"])
    r.add_api_route("/audit/login", login, methods=["POST"])
    r.add_api_route("/audit/logout", logout, methods=["POST"])
    r.add_api_route("/audit/static/{name}", static, methods=["GET"])
    return r
