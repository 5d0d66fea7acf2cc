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
from app.errors import (
    Fault,
    Forbidden,
    InvalidInput,
    NotFound,
    ServingError,
    Unauthorized,
    UnsupportedMediaType,
    status_of,
)
from app.rest.body import BodyHeaders, read_body
from app.rest.responses import json_response
from app.rest.routes.deps import ServiceDep

MAX_FORM_BYTES = 64 * 1024
FORM_TYPE = "application/x-www-form-urlencoded"
LOGIN_FIELDS = frozenset({"key", "username"})  # the hidden user name helps password managers
# A page's context from the query (app.console.views).
View = Callable[[Service, LoadedModel, Mapping[str, str]], Awaitable[dict[str, Any]]]


def _base(model: LoadedModel, page: str, request: Request) -> dict[str, Any]:
    return {
        "page": page,
        "model": model,
        "root": pages.root_of(request.scope),
        "signed_in": presented_key(request.scope["headers"], "/audit") is not None,
    }


async def _form(request: Request, fields: Callable[[str], bool]) -> dict[str, str]:
    """The posted form, read no further than :data:`MAX_FORM_BYTES`; a field that
    ``fields`` does not take, or one given twice, is a 422 naming it."""
    head = BodyHeaders.of(request.scope["headers"])
    media = (head.content_type or FORM_TYPE).split(";", 1)[0].strip().lower()
    if media != FORM_TYPE:
        raise UnsupportedMediaType(
            f"expected {FORM_TYPE}, got {head.content_type!r}", field="header Content-Type"
        )
    raw = await read_body(request.stream(), head, MAX_FORM_BYTES, "the console's form limit")
    try:
        text = raw.decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise InvalidInput.one("invalid_value", "body", "the form is not UTF-8") from None
    form: dict[str, str] = {}
    faults = []
    for name, value in pairs:
        if not fields(name):
            faults.append(Fault("unknown_field", name, "not a field of this form"))
        elif name in form:
            faults.append(Fault("duplicate_field", name, "given more than once"))
        form[name] = value
    if faults:
        raise InvalidInput(faults)
    return form


async def _view(request: Request, service: Service, page: str, view: View) -> Response:
    """The page ``page``.html from ``view``'s context; a fault in the query, the error page."""
    model = service.runtime.require()
    base = _base(model, page, request)
    try:
        query = views.page_query(request.query_params.multi_items(), views.PAGE_PARAMS[page])
        context = await view(service, model, query)
    except ServingError as exc:
        return pages.error_page(exc, base)
    return pages.render(f"{page}.html", {**base, **context})


async def decisions(request: Request, service: ServiceDep) -> Response:
    return await _view(request, service, "decisions", views.decisions)


async def record(request: Request, service: ServiceDep) -> Response:
    model = service.runtime.require()
    base = _base(model, "record", request)
    try:
        query = views.page_query(request.query_params.multi_items(), views.PAGE_PARAMS["record"])
        found = await views.record(service, query.get("request_id", ""))
    except ServingError as exc:
        return pages.error_page(exc, base)
    return pages.render("record.html", {**base, "record": found, "experts": model.experts})


async def timeline(request: Request, service: ServiceDep) -> Response:
    return await _view(request, service, "timeline", views.timeline)


async def timeline_json(request: Request, service: ServiceDep) -> Response:
    model = service.runtime.require()
    query = views.page_query(request.query_params.multi_items(), views.PAGE_PARAMS["timeline"])
    context = await views.timeline(service, model, query)
    return json_response({"timeline": context["data"], "version_changes": context["changes"]})


async def performance(request: Request, service: ServiceDep) -> Response:
    return await _view(request, service, "performance", views.performance)


async def probe_form(request: Request, service: ServiceDep) -> Response:
    model = service.runtime.require()
    base = _base(model, "probe", request)
    try:
        views.page_query(request.query_params.multi_items(), ())
    except ServingError as exc:
        return pages.error_page(exc, base)
    return pages.render("probe.html", {**base, "values": {}})


async def probe(request: Request, service: ServiceDep) -> Response:
    model = service.runtime.require()
    base = _base(model, "probe", request)
    try:
        views.page_query(request.query_params.multi_items(), ())
        form = await _form(request, probing.form_fields(model).__contains__)
    except ServingError as exc:
        return pages.error_page(exc, base)
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
    base = _base(model, "bundle", request)
    try:
        views.page_query(request.query_params.multi_items(), ())
    except ServingError as exc:
        return pages.error_page(exc, base)
    return pages.render("bundle.html", {**base, **views.bundle(service, model)})


async def login_form(request: Request) -> Response:
    try:
        views.page_query(request.query_params.multi_items(), ())
    except ServingError as exc:
        return pages.login_page(exc, request.scope, status_of(exc))
    return pages.login_page(None, request.scope)


async def login(request: Request, service: ServiceDep) -> Response:
    """Check the key once and keep it in the console's cookie; a refused key sets none."""
    key = ""
    try:
        views.page_query(request.query_params.multi_items(), ())
        key = (await _form(request, LOGIN_FIELDS.__contains__)).get("key", "").strip()
        KeyRing.from_settings(service.settings).check(Role.AUDITOR, key or None)
    except (Unauthorized, Forbidden) as exc:
        # The key came in the form's field, not in a header: the fault is the field's.
        message = exc.fault.message if key else "enter an auditor key"
        refused = type(exc)(message, "key")
        return pages.login_page(refused, request.scope, status_of(exc))
    except ServingError as exc:
        return pages.login_page(exc, request.scope, status_of(exc))
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
