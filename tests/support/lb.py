"""Starting what docker-compose runs, for real: replicas with the image's CMD, and nginx
with the compose template in front of them."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.settings import Settings
from tests.support.deploy import (
    NGINX_TEMPLATE,
    Proc,
    Processes,
    Stage,
    clean_env,
    exec_form,
    nginx_main_conf,
    render_template,
    uvicorn_command,
    wait_until_ready,
)
from tests.support.services import free_port, require_tool

PREDICT = {"instances": [{"x1": 0.1, "x2": -0.3}]}
MAX_BODY = Settings.model_fields["max_body_bytes"].default
# Replicas sharing a PostgreSQL trail hash inputs with one key (IABMA_AUDIT_HASH_KEY).
TEST_HASH_KEY = "nginx-test-hash-key-0123456789abcdef"


@dataclass
class Replica:
    proc: Proc
    addr: str  # host:port, as nginx reports it in X-Upstream
    grpc_addr: str  # host:port of its IABMA_GRPC_PORT


@dataclass
class LoadBalancer:
    url: str
    nginx: Proc
    replicas: list[Replica]
    grpc: str  # nginx's gRPC listener, host:port


def start_replica(
    procs: Processes,
    dockerfile: list[Stage],
    name: str,
    store: Path,
    audit_url: str,
    **settings: str,
) -> Replica:
    port, grpc_port = free_port(), free_port()
    cmd = uvicorn_command(exec_form(dockerfile[-1].last("CMD").args), "127.0.0.1", port)
    env = clean_env(
        IABMA_GRPC_PORT=str(grpc_port),
        IABMA_GRPC_HOST="127.0.0.1",
        IABMA_STORE=str(store),
        IABMA_MODEL_NAME="demo",
        IABMA_AUDIT_URL=audit_url,
        IABMA_AUDIT_HASH_KEY=TEST_HASH_KEY,
        # nginx connects from loopback, so its X-Forwarded-* headers are believed.
        FORWARDED_ALLOW_IPS="127.0.0.1",
        **settings,
    )
    workdir = procs.workdir / name
    workdir.mkdir(exist_ok=True)
    uvicorn = Path(sys.executable).with_name(cmd[0])
    proc = procs.start(name, [str(uvicorn), *cmd[1:]], env, cwd=workdir)
    return Replica(proc, f"127.0.0.1:{port}", f"127.0.0.1:{grpc_port}")


def start_nginx(
    procs: Processes, upstreams: list[str], grpc_upstreams: list[str], name: str = "nginx"
) -> tuple[str, Proc, str]:
    """nginx's REST URL, its process, and its gRPC listener (host:port)."""
    nginx = require_tool("nginx")
    prefix = procs.workdir / name
    (prefix / "conf.d").mkdir(parents=True)
    port, grpc_port = free_port(), free_port()
    rendered = render_template(
        NGINX_TEMPLATE.read_text(encoding="utf-8"),
        {
            "NGINX_LISTEN": f"127.0.0.1:{port}",
            "NGINX_UPSTREAM_1": upstreams[0],
            "NGINX_UPSTREAM_2": upstreams[1],
            "NGINX_MAX_BODY_BYTES": str(MAX_BODY),
            "NGINX_GRPC_LISTEN": f"127.0.0.1:{grpc_port}",
            "NGINX_GRPC_UPSTREAM_1": grpc_upstreams[0],
            "NGINX_GRPC_UPSTREAM_2": grpc_upstreams[1],
        },
    )
    assert "${" not in rendered
    site = prefix / "conf.d" / "default.conf"
    site.write_text(rendered, encoding="utf-8")
    conf = prefix / "nginx.conf"
    conf.write_text(nginx_main_conf(prefix, site), encoding="utf-8")
    args = ["-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")]
    check = subprocess.run(
        [nginx, "-t", *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert check.returncode == 0, check.stderr
    proc = procs.start(name, [nginx, *args, "-g", "daemon off;"], clean_env(), cwd=prefix)
    return f"http://127.0.0.1:{port}", proc, f"127.0.0.1:{grpc_port}"


def start_load_balancer(
    procs: Processes, dockerfile: list[Stage], store: Path, audit_url: str, **settings: str
) -> LoadBalancer:
    replicas = [
        start_replica(procs, dockerfile, f"app{i}", store, audit_url, **settings) for i in (1, 2)
    ]
    for r in replicas:
        wait_until_ready(f"http://{r.addr}/readyz", r.proc)
    url, nginx, grpc = start_nginx(
        procs, [r.addr for r in replicas], [r.grpc_addr for r in replicas]
    )
    wait_until_ready(f"{url}/livez", nginx)
    return LoadBalancer(url, nginx, replicas, grpc)


def upstreams_of(response: httpx.Response) -> list[str]:
    return [a.strip() for a in response.headers.get("x-upstream", "").split(",") if a.strip()]
