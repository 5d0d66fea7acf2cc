"""FastAPI dependencies: the service and the request context, typed, for every route."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.context import SCOPE_KEY, RequestContext
from app.service import Service


# Both are ``async``: FastAPI runs a plain function dependency in its threadpool, a hop
# that costs more than the whole of a single-row prediction.
async def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


async def get_context(request: Request) -> RequestContext:
    ctx: RequestContext = request.scope[SCOPE_KEY]
    return ctx


ServiceDep = Annotated[Service, Depends(get_service)]
ContextDep = Annotated[RequestContext, Depends(get_context)]
