"""The console's Jinja2 templates and static files, all shipped in the package, and its
HttpOnly session cookie for the auditor's key (docs/design.md, "The console")."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.responses import HTMLResponse, Response
from starlette.types import Scope

from app.core.access import CONSOLE_COOKIE as COOKIE
from app.errors import ServingError, Unauthorized, status_of

HERE = Path(__file__).parent
STATIC = HERE / "static"
COOKIE_PATH = "/audit"
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
# The pages are built per request from the audit trail: no cache may keep one.
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(("html",)),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = lambda v, digits=4: "" if v is None else f"{float(v):.{digits}f}"
    env.filters["pct"] = lambda v: "–" if v is None else f"{100 * float(v):.1f}%"
    return env


def render(template: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    html = environment().get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=NO_STORE)


def error_page(exc: ServingError, base: dict[str, Any]) -> HTMLResponse:
    status = status_of(exc)
    return render("error.html", {**base, "status": status, "faults": exc.faults}, status)


def root_of(scope: Scope) -> str:
    """The root path the app is mounted under (uvicorn's ``--root-path``), which every link,
    redirect and cookie path of the console starts with."""
    root: str = scope.get("root_path", "")
    return root.rstrip("/")


def login_page(exc: ServingError | None, scope: Scope, status: int = 200) -> HTMLResponse:
    context = {"page": "login", "error": exc, "root": root_of(scope)}
    response = render("login.html", context, status)
    if isinstance(exc, Unauthorized):
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


def static_file(name: str) -> Response | None:
    path = STATIC / name
    kind = STATIC_TYPES.get(path.suffix)
    if kind is None or path.parent != STATIC or not path.is_file():
        return None
    return Response(path.read_bytes(), media_type=kind, headers={"Cache-Control": "max-age=3600"})


def set_cookie(response: Response, key: str, secure: bool, root: str = "") -> None:
    response.set_cookie(
        COOKIE,
        quote(key, safe=""),
        path=root + COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=secure,
    )


def clear_cookie(response: Response, root: str = "") -> None:
    response.delete_cookie(COOKIE, path=root + COOKIE_PATH, httponly=True, samesite="strict")
