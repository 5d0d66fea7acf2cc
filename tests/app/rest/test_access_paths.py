"""Keys hold however the app is mounted and however a path is written: the guard decides on
the path routing takes (without uvicorn's ``--root-path``), every route has a role, and a
hostile spelling of a path (``%0A``, ``//``, ``..``, ``;``, case, a trailing slash,
percent-encoded letters) is refused or routed nowhere, never served without its key."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.routing import Route

from app.core.access import ROUTES, KeyRing, Role, role_of
from app.errors import InvalidPath, StartupRefused
from app.main import create_app
from app.rest.access import AccessGuard
from app.rest.paths import check_path, routes_by_path
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import UvicornProcess
from tests.support.raw_http import RawResponse, raw_request

KEYS = {Role.DATA: "data-key", Role.FEEDBACK: "feedback-key", Role.AUDITOR: "auditor-key",
        Role.METRICS: "metrics-key"}  # fmt: skip
ENV_KEYS = {"IABMA_API_KEYS": KEYS[Role.DATA], "IABMA_FEEDBACK_KEYS": KEYS[Role.FEEDBACK],
            "IABMA_AUDITOR_KEYS": KEYS[Role.AUDITOR],
            "IABMA_METRICS_KEYS": KEYS[Role.METRICS]}  # fmt: skip
ROW = b'{"instances": [{"x1": 0.4, "x2": -0.3}]}'
OIP = (b'{"inputs": [{"name": "x1", "shape": [1], "datatype": "FP64", "data": [0.4]},'
       b' {"name": "x2", "shape": [1], "datatype": "FP64", "data": [-0.3]}]}')  # fmt: skip
BODIES = {"/predict": ROW, "/v2/models/{name}/infer": OIP, "/feedback": b'{"outcomes": []}',
          "/audit/probe": b"f%3Ax1=0.3&f%3Ax2=-0.2"}  # fmt: skip
FORM = "application/x-www-form-urlencoded"


def app_routes(bundles: Bundles, tmp: Path) -> list[tuple[str, str, Route]]:
    """(template, method, route) of every route the app serves, read off a built app."""
    app = create_app(make_settings(bundles.store, tmp, metrics_keys="k"))
    out = []
    for template, route in routes_by_path(app.routes):
        assert isinstance(route, Route), template
        out.extend((template, m, route) for m in sorted(route.methods - {"HEAD"}))
    return out


def concrete(template: str) -> str:
    return template.replace("{name}", "demo")


def protected(bundles: Bundles, tmp: Path) -> list[tuple[str, str, str, Role]]:
    """(template, method, path, role) of every route a key guards."""
    return [
        (t, m, concrete(t), role)
        for t, m, _r in app_routes(bundles, tmp)
        if (role := ROUTES[t]) is not None
    ]


# -- the table, against the app's routes ------------------------------------------------------
def test_every_route_has_a_role_and_every_role_a_route(bundles: Bundles, tmp_path: Path) -> None:
    templates = {t for t, _m, _r in app_routes(bundles, tmp_path)}
    assert templates == set(ROUTES)


def test_the_app_refuses_to_start_with_a_route_without_a_role() -> None:
    async def explain() -> Response:
        return Response()

    guard = AccessGuard(KeyRing({}))
    with pytest.raises(StartupRefused, match=r"/explain/\{name\}"):
        guard.cover([APIRoute("/explain/{name}", explain), APIRoute("/weights", explain)])


@pytest.mark.parametrize(
    ("path", "role"),
    [("/v2/models/a.b-c/infer", Role.DATA), ("/v2/models/demo/ready", None),
     ("/v2/models/x/y/ready", Role.DATA), ("/v2/models/{name}/infer", Role.DATA),
     ("/audit/static/console.css", None), ("/audit/static/a/b", Role.AUDITOR),
     ("/audit/nowhere", Role.AUDITOR), ("/models/x", Role.DATA), ("/nowhere", None),
     ("/audit/", Role.AUDITOR), ("/v2/", None), ("/v2/health/live", None)],
)  # fmt: skip
def test_a_path_no_route_takes_keeps_its_namespace_s_role(path: str, role: Role | None) -> None:
    assert role_of(path) is role


def variants(path: str) -> list[str]:
    """Spellings of ``path`` an attacker tries, as the server decodes them."""
    head, tail = path[:2], path[2:]
    return [
        path, path + "\n", path + "\r", path + "\x00", path + "\t", "\n" + path, path + "\n\n",
        path + "/", "/" + path, path.upper(), path + ";", path + ";x=1", path + " ",
        "/api/.." + path, "/." + path, path + "/.", path.replace("/", "//"),
        head + "\u200b" + tail, path + "%",
    ]  # fmt: skip


def test_routing_never_takes_a_path_the_guard_reads_otherwise(
    bundles: Bundles, tmp_path: Path
) -> None:
    """Every spelling that routing's own regexes match (Starlette's ``^...$`` also matches
    before a final newline) is refused as a path, or given the role of the route taken."""
    routes = app_routes(bundles, tmp_path)
    taken = 0
    for template, _method, _route in routes:
        for spelling in variants(concrete(template)):
            matched = [t for t, _m, r in routes if r.path_regex.match(spelling)]
            if not matched:
                continue
            taken += 1
            try:
                check_path(spelling)
            except InvalidPath:
                continue
            assert role_of(spelling) is ROUTES[matched[0]], (spelling, matched)
    assert taken > len(routes), "the spellings must include some that routing takes"


# -- real servers: as mounted plainly and under --root-path ----------------------------------
@pytest.fixture(scope="module", params=["", "/api"], ids=["plain", "root-path"])
def server(
    request: pytest.FixtureRequest, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UvicornProcess]:
    root: str = request.param
    tmp = tmp_path_factory.mktemp("mounted")
    env = {
        "IABMA_STORE": str(bundles.store), "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_URL": f"sqlite:///{tmp / 'audit.db'}", "IABMA_AUDIT_PAYLOAD": "full",
        "IABMA_RELOAD_INTERVAL_SECONDS": "0", "IABMA_LOG_LEVEL": "WARNING", **ENV_KEYS,
    }  # fmt: skip
    if root:  # and CORS on, whose layer runs before the guard
        env["IABMA_CORS_ORIGINS"] = "https://console.example"
    args = ("--root-path", root) if root else ()
    with UvicornProcess(env, args) as proc:
        proc.wait_ready()
        ok = raw_request(proc.base_url, "POST", "/predict", _headers(Role.DATA, "/predict"), ROW)
        assert ok.status == 200, ok.text
        yield proc


def _headers(role: Role | None, template: str) -> dict[str, str]:
    headers = {"Content-Type": FORM if template.startswith("/audit") else "application/json"}
    if role is not None:
        headers["Authorization"] = f"Bearer {KEYS[role]}"
    return headers


def send(
    server: UvicornProcess, method: str, target: str, template: str, role: Role | None
) -> RawResponse:
    body = BODIES.get(template) if method == "POST" else None
    return raw_request(server.base_url, method, target, _headers(role, template), body)


def test_every_guarded_route_refuses_no_key_and_opens_with_its_own(
    server: UvicornProcess, bundles: Bundles, tmp_path: Path
) -> None:
    seen = set()
    for template, method, path, role in protected(bundles, tmp_path):
        target = path + ("?limit=5" if path == "/weights" else "")
        bare = send(server, method, target, template, None)
        assert bare.status == 401, (method, path, bare.status, bare.text)
        for other in set(KEYS) - {role}:
            wrong = send(server, method, target, template, other)
            assert wrong.status == 403, (method, path, other, wrong.status)
        right = send(server, method, target, template, role)
        assert right.status not in (401, 403), (method, path, right.status, right.text)
        seen.add(template)
    assert {t for t, r in ROUTES.items() if r is not None} <= seen


def test_no_spelling_of_a_guarded_path_is_served_without_its_key(
    server: UvicornProcess, bundles: Bundles, tmp_path: Path
) -> None:
    refused = {400, 401, 404, 405}
    checked = 0
    for template, method, path, _role in protected(bundles, tmp_path):
        spellings = [quote(v, safe="/;") for v in variants(path)]
        # The server decodes these into the path itself.
        spellings += [
            path[0] + "%" + format(ord(path[1]), "02X") + path[2:],
            path.replace("/", "%2F"), path.replace("/", "%2f", 1),
            re.sub(r"[a-z]", lambda m: "%" + format(ord(m.group()), "02x"), path),
            f"http://127.0.0.1{path}",
        ]  # fmt: skip
        for target in spellings:
            r = send(server, method, target, template, None)
            checked += 1
            if r.status in (307, 308):  # a trailing slash moved: the new place is guarded
                location = r.headers["location"]
                assert location.endswith(path), (target, location)
                continue
            assert r.status in refused, (method, target, r.status, r.text[:200])
    assert checked > 300


def test_a_control_character_in_a_path_is_a_400_naming_the_path(server: UvicornProcess) -> None:
    r = raw_request(server.base_url, "GET", "/weights%0A?limit=1")
    assert r.status == 400
    assert '"field":"path"' in r.text and "control character" in r.text
    oip = raw_request(server.base_url, "GET", "/v2/models/demo%00")
    assert oip.status == 400 and oip.text.startswith('{"error":"path: ')


def test_errors_keep_their_family_under_the_root_path(server: UvicornProcess) -> None:
    oip = send(server, "POST", "/v2/models/demo/infer", "/v2/models/{name}/infer", None)
    assert oip.status == 401 and oip.text.startswith('{"error":"header Authorization')
    bad = raw_request(server.base_url, "POST", "/v2/models/demo/infer",
                      _headers(Role.DATA, "/v2"), b"{")  # fmt: skip
    assert bad.status == 400 and bad.text.startswith('{"error":"body: malformed JSON')
    missing = raw_request(server.base_url, "GET", "/v2/models/other",
                          _headers(Role.DATA, "/v2"))  # fmt: skip
    assert missing.status == 404 and missing.text.startswith('{"error":"')
    native = send(server, "GET", "/weights", "/weights", None)
    assert native.text.startswith('{"error":{"code":"unauthorized"')


def test_a_refused_path_cannot_forge_a_log_line(bundles: Bundles, tmp_path: Path) -> None:
    """Text logs are one line a request: a decoded newline in a path would start a line of
    the client's making."""
    env = {
        "IABMA_STORE": str(bundles.store), "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_URL": f"sqlite:///{tmp_path / 'audit.db'}", "IABMA_LOG_FORMAT": "text",
        "IABMA_LOG_LEVEL": "INFO",
    }  # fmt: skip
    forged = "2026-01-01T00:00:00.000+00:00 INFO iabma.request GET /weights 200"
    with UvicornProcess(env, cwd=tmp_path) as proc:
        proc.wait_ready()
        r = raw_request(proc.base_url, "GET", "/x%0A" + quote(forged, safe="/:+"))
        assert r.status == 400
        proc.terminate()
        _out, err = proc.output()
    lines = err.splitlines()
    assert not any(line.startswith("2026-01-01T00:00:00") for line in lines), lines[-5:]
    assert any("GET /x%0A2026-01-01T00:00:00" in line and " 400 " in line for line in lines)
