"""The service and the request context, typed, for every route: FastAPI dependencies
(``ServiceDep``, ``ContextDep``), and the accessors the two data-plane routes call
directly, the one place that knows where the middleware leaves the context."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.core.context import SCOPE_KEY, RequestContext
from app.core.service import Service


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def context_of(request: Request) -> RequestContext:
    ctx: RequestContext = request.scope[SCOPE_KEY]
    return ctx


# Both are ``async``: FastAPI runs a plain function dependency in its threadpool.
async def get_service(request: Request) -> Service:
    return service_of(request)


async def get_context(request: Request) -> RequestContext:
    return context_of(request)


ServiceDep = Annotated[Service, Depends(get_service)]
ContextDep = Annotated[RequestContext, Depends(get_context)]
