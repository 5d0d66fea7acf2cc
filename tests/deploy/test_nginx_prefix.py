"""The service mounted under a path prefix, as an ingress or a shared gateway mounts it:
real nginx strips ``/api`` and passes the rest to a replica run by the image's CMD with
``--root-path /api``. Every guarded route still needs its key through the prefix, no
spelling of a path gets past one, and the console signs in and stays under the prefix."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import pytest

from app.core.access import CONSOLE_COOKIE, ROUTES
from tests.support.deploy import (
    Processes,
    Stage,
    clean_env,
    exec_form,
    nginx_main_conf,
    uvicorn_command,
    wait_until_ready,
)
from tests.support.raw_http import raw_request
from tests.support.services import free_port, require_tool

PREFIX = "/api"
KEYS = {"api": "prefix-api-key", "auditor": "prefix-auditor-key",
        "feedback": "prefix-feedback-key", "metrics": "prefix-metrics-key"}  # fmt: skip
# Every guarded route, by the key that opens it, as a client reaches it through the prefix.
GUARDED = [
    ("POST", "/predict", "api"), ("GET", "/models", "api"), ("GET", "/v2", "api"),
    ("GET", "/v2/models/demo", "api"), ("POST", "/v2/models/demo/infer", "api"),
    ("POST", "/feedback", "feedback"), ("GET", "/weights?limit=5", "auditor"),
    ("GET", "/performance", "auditor"), ("GET", "/audit", "auditor"),
    ("GET", "/audit/record?request_id=x", "auditor"), ("GET", "/audit/timeline", "auditor"),
    ("GET", "/audit/timeline.json", "auditor"), ("GET", "/audit/performance", "auditor"),
    ("GET", "/audit/probe", "auditor"), ("POST", "/audit/probe", "auditor"),
    ("GET", "/audit/bundle", "auditor"), ("GET", "/drift", "auditor"),
    ("GET", "/metrics", "metrics"),
]  # fmt: skip
SITE = """
upstream iabma_app {{ server {upstream}; keepalive 8; }}
server {{
    listen {listen};
    server_tokens off;
    # The gateway's own routes would live beside this one; nothing else reaches the app.
    location {prefix}/ {{
        proxy_pass http://iabma_app/;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-Proto $scheme;
    }}
}}
"""


@dataclass(frozen=True)
class Gateway:
    url: str  # nginx, whose /api/ is the app
    app: str  # the replica itself


@pytest.fixture(scope="module")
def gateway(
    module_procs: Processes, dockerfile: list[Stage], demo_store: Path
) -> Iterator[Gateway]:
    nginx = require_tool("nginx")
    port, front = free_port(), free_port()
    cmd = uvicorn_command(exec_form(dockerfile[-1].last("CMD").args), "127.0.0.1", port)
    workdir = module_procs.workdir / "prefixed"
    workdir.mkdir()
    env = clean_env(
        IABMA_STORE=str(demo_store), IABMA_MODEL_NAME="demo",
        IABMA_AUDIT_URL=f"sqlite:///{workdir / 'audit.db'}", IABMA_API_KEYS=KEYS["api"],
        IABMA_AUDITOR_KEYS=KEYS["auditor"], IABMA_FEEDBACK_KEYS=KEYS["feedback"],
        IABMA_METRICS_KEYS=KEYS["metrics"], FORWARDED_ALLOW_IPS="127.0.0.1",
    )  # fmt: skip
    python = Path(sys.executable).with_name(cmd[0])
    app = module_procs.start("app", [str(python), *cmd[1:], "--root-path", PREFIX], env, workdir)
    wait_until_ready(f"http://127.0.0.1:{port}/readyz", app)
    conf_dir = workdir / "nginx"
    conf_dir.mkdir()
    site = conf_dir / "site.conf"
    site.write_text(SITE.format(upstream=f"127.0.0.1:{port}", listen=f"127.0.0.1:{front}",
                                prefix=PREFIX), encoding="utf-8")  # fmt: skip
    conf = conf_dir / "nginx.conf"
    conf.write_text(nginx_main_conf(conf_dir, site), encoding="utf-8")
    args = ["-p", str(conf_dir), "-c", str(conf), "-e", str(conf_dir / "error.log")]
    check = subprocess.run([nginx, "-t", *args], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    proc = module_procs.start("nginx", [nginx, *args, "-g", "daemon off;"], clean_env(), conf_dir)
    url = f"http://127.0.0.1:{front}"
    wait_until_ready(f"{url}{PREFIX}/readyz", proc)
    yield Gateway(url, f"http://127.0.0.1:{port}")


def body_of(method: str, path: str) -> tuple[dict[str, str], bytes | None]:
    if method != "POST":
        return {}, None
    if path.startswith("/audit"):
        return {"Content-Type": "application/x-www-form-urlencoded"}, b"f%3Ax1=0.1&f%3Ax2=0.2"
    if path == "/feedback":
        return {"Content-Type": "application/json"}, b'{"outcomes": []}'
    if path.endswith("/infer"):
        data = (b'{"inputs": [{"name": "x1", "shape": [1], "datatype": "FP64", "data": [0.1]},'
                b' {"name": "x2", "shape": [1], "datatype": "FP64", "data": [0.2]}]}')  # fmt: skip
        return {"Content-Type": "application/json"}, data
    return {"Content-Type": "application/json"}, b'{"instances": [{"x1": 0.1, "x2": 0.2}]}'


def test_the_table_of_guarded_routes_is_whole() -> None:
    guarded = {t.replace("{name}", "demo") for t, role in ROUTES.items() if role is not None}
    assert guarded == {p.split("?")[0] for _m, p, _k in GUARDED}


@pytest.mark.parametrize(("method", "path", "key"), GUARDED)
def test_every_guarded_route_needs_its_key_through_the_prefix(
    gateway: Gateway, method: str, path: str, key: str
) -> None:
    headers, body = body_of(method, path)
    bare = raw_request(gateway.url, method, PREFIX + path, headers, body)
    assert bare.status == 401, (path, bare.status, bare.text[:300])
    for other in set(KEYS) - {key}:
        wrong = {**headers, "Authorization": f"Bearer {KEYS[other]}"}
        r = raw_request(gateway.url, method, PREFIX + path, wrong, body)
        assert r.status == 403, (path, other, r.status)
    right = {**headers, "Authorization": f"Bearer {KEYS[key]}"}
    r = raw_request(gateway.url, method, PREFIX + path, right, body)
    assert r.status not in (401, 403), (path, r.status, r.text[:300])
    assert r.status != 404 or "no audit record" in r.text, "routed by the app, not nginx"


@pytest.mark.parametrize(("method", "path", "key"), GUARDED)
def test_no_spelling_gets_past_the_key_through_the_prefix(
    gateway: Gateway, method: str, path: str, key: str
) -> None:
    headers, body = body_of(method, path)
    route, _, query = path.partition("?")
    query = "?" + query if query else ""
    spellings = [
        f"{PREFIX}{route}%0A{query}", f"{PREFIX}{route}%00{query}", f"{PREFIX}/{route}{query}",
        f"{PREFIX}{route}/{query}", f"{PREFIX}{route.upper()}{query}", f"{PREFIX}{route};x{query}",
        f"{PREFIX}/x/..{route}{query}", f"{PREFIX}/.{route}{query}",
        f"{PREFIX}{route.replace('/', '%2F')}{query}", f"{PREFIX}%2F{route[1:]}{query}",
        PREFIX + "/" + "".join(f"%{ord(c):02X}" for c in route[1:]) + query,
        f"/x/..{PREFIX}{route}{query}", f"{PREFIX}/..{PREFIX}{route}{query}", f"{route}{query}",
        f"{PREFIX}{PREFIX}{route}{query}", f"{PREFIX}%20{route}{query}",
        quote(f"{PREFIX}{route}", safe="") + query,
    ]  # fmt: skip
    for target in spellings:
        r = raw_request(gateway.url, method, target, headers, body)
        if r.status in (301, 307, 308):  # a slash moved: the new place asks for the key
            moved = urlsplit(r.headers["location"])
            again = raw_request(gateway.url, method, moved.path, headers, body)
            assert again.status in (400, 401, 404, 405), (target, moved, again.status)
            continue
        assert r.status in (400, 401, 404, 405), (target, r.status, r.text[:300])


def test_the_console_signs_in_and_stays_under_the_prefix(gateway: Gateway) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded", "Origin": gateway.url}
    with httpx.Client(base_url=gateway.url, timeout=10) as c:
        page = c.get(PREFIX + "/audit", headers={"Accept": "text/html"})
        assert page.status_code == 401 and f'action="{PREFIX}/audit/login"' in page.text
        css = c.get(PREFIX + "/audit/static/console.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        # A browser posts the form with its Origin, which holds nginx's port; nginx passes
        # Host without it.
        signed = c.post(PREFIX + "/audit/login", content=f"key={KEYS['auditor']}", headers=form)
        assert signed.status_code == 303, signed.text
        assert signed.headers["location"] == f"{PREFIX}/audit"
        assert f"path={PREFIX}/audit" in signed.headers["set-cookie"].lower()
        session = {"Cookie": f"{CONSOLE_COOKIE}={KEYS['auditor']}"}
        home = c.get(PREFIX + "/audit", headers=session)
        assert home.status_code == 200 and f'href="{PREFIX}/audit/timeline"' in home.text
        evil = {**form, "Origin": "http://evil.example"}
        refused = c.post(PREFIX + "/audit/login", content=f"key={KEYS['auditor']}", headers=evil)
        assert refused.status_code == 403 and "set-cookie" not in refused.headers
