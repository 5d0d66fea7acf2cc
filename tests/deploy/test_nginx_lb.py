"""The repo's nginx template, rendered as the nginx image renders it, run by real nginx in
front of two real uvicorn replicas on 127.0.0.1 that share one PostgreSQL audit trail."""

from __future__ import annotations

import json
import re
import signal
import socket
import socketserver
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy

from app.audit.store.packing import unpack_request_id
from tests.support.deploy import (
    NGINX_TEMPLATE,
    Processes,
    Stage,
    template_variables,
    wait_until_ready,
)
from tests.support.lb import (
    MAX_BODY,
    PREDICT,
    LoadBalancer,
    start_load_balancer,
    start_nginx,
    start_replica,
    upstreams_of,
)
from tests.support.services import open_connections, require_tool, wait_for

LUA_SCRIPT = Path(__file__).with_name("predict.lua")


@pytest.fixture(scope="module")
def lb(
    module_procs: Processes, dockerfile: list[Stage], demo_store: Path, pg_session_url: str
) -> LoadBalancer:
    return start_load_balancer(module_procs, dockerfile, demo_store, pg_session_url)


def test_template_leaves_nginx_variables_alone() -> None:
    envs, nginx_vars = template_variables(NGINX_TEMPLATE.read_text(encoding="utf-8"))
    assert envs == {
        "NGINX_LISTEN", "NGINX_UPSTREAM_1", "NGINX_UPSTREAM_2", "NGINX_MAX_BODY_BYTES",
        "NGINX_GRPC_LISTEN", "NGINX_GRPC_UPSTREAM_1", "NGINX_GRPC_UPSTREAM_2",
    }  # fmt: skip
    # The image substitutes every variable set in its environment; lower-case nginx
    # variables cannot collide with the upper-case names an environment uses.
    assert all(v == v.lower() for v in nginx_vars), nginx_vars


def test_predictions_spread_over_both_replicas_with_one_audit_trail(lb: LoadBalancer) -> None:
    sent: dict[str, str] = {}
    with httpx.Client(base_url=lb.url, timeout=10) as client:
        for i in range(50):
            rid = f"lb-{uuid.uuid4().hex[:8]}-{i}"
            r = client.post("/predict", json=PREDICT, headers={"X-Request-ID": rid})
            assert r.status_code == 200, r.text
            assert r.headers.get_list("x-request-id") == [rid]
            assert r.json()["request_id"] == rid
            (upstream,) = upstreams_of(r)
            sent[rid] = upstream
    counts = Counter(sent.values())
    assert set(counts) == {r.addr for r in lb.replicas}, counts
    assert min(counts.values()) >= 15, f"round robin should share the load: {counts}"

    # Each replica finds the records the other one wrote.
    other = {lb.replicas[0].addr: lb.replicas[1].addr, lb.replicas[1].addr: lb.replicas[0].addr}
    for rid, upstream in list(sent.items())[:10]:
        r = httpx.get(f"http://{other[upstream]}/weights", params={"request_id": rid}, timeout=10)
        assert r.status_code == 200, r.text
        assert r.json()["request_id"] == rid

    # nginx's JSON access log ties each request id to the replica that answered it.
    logged = {}
    for line in lb.nginx.log.read_text(encoding="utf-8").splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            logged[entry["request_id"]] = entry
    for rid, upstream in sent.items():
        assert logged[rid]["upstream"] == upstream and logged[rid]["status"] == 200


def test_a_request_id_is_minted_when_the_client_sends_none(lb: LoadBalancer) -> None:
    r = httpx.post(f"{lb.url}/predict", json=PREDICT, timeout=10)
    assert r.status_code == 200, r.text
    ids = r.headers.get_list("x-request-id")
    assert len(ids) == 1 and re.fullmatch(r"[0-9a-f]{32}", ids[0]), ids
    assert r.json()["request_id"] == ids[0]


def test_grpc_through_nginx_reaches_both_replicas(lb: LoadBalancer) -> None:
    """tritonclient[grpc] with its defaults through nginx's gRPC listener (grpc_pass)."""
    import numpy as np
    import tritonclient.grpc as tgrpc
    from tritonclient.utils import InferenceServerException

    client = tgrpc.InferenceServerClient(lb.grpc)
    assert client.is_server_ready() and client.is_model_ready("demo")
    inputs = []
    for name in ("x1", "x2"):
        t = tgrpc.InferInput(name, [1, 1], "FP32")
        t.set_data_from_numpy(np.array([[0.1]], dtype=np.float32))
        inputs.append(t)
    ids = set()
    for i in range(6):
        r = client.infer("demo", inputs, request_id=f"grpc-lb-{i}")
        assert r.as_numpy("weights").shape == (1, 5)
        ids.add(r.get_response().parameters["request_id"].string_param)
    assert len(ids) == 6
    with pytest.raises(InferenceServerException, match="missing tensors"):
        client.infer("demo", inputs[:1])
    # Round robin: both replicas counted gRPC rows in their metrics.
    seen = [
        "oip_grpc" in httpx.get(f"http://{r.addr}/metrics", timeout=10).text for r in lb.replicas
    ]
    assert all(seen), seen


def test_a_body_over_the_limit_is_refused_by_nginx_as_json(lb: LoadBalancer) -> None:
    body = json.dumps(PREDICT).encode()
    big = body[:-1] + b" " * (MAX_BODY + 1 - len(body)) + b"}"
    assert len(big) == MAX_BODY + 1
    r = httpx.post(
        f"{lb.url}/predict", content=big, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large"
    assert "x-upstream" not in r.headers or not upstreams_of(r), "a replica saw the body"
    assert len(r.headers.get_list("x-request-id")) == 1

    at_limit = body[:-1] + b" " * (MAX_BODY - len(body)) + b"}"
    r = httpx.post(
        f"{lb.url}/predict", content=at_limit, headers={"Content-Type": "application/json"},
        timeout=10,
    )  # fmt: skip
    assert r.status_code == 200, r.text


def test_wrk_through_nginx(lb: LoadBalancer, record_property: pytest.RecordProperty) -> None:
    wrk = require_tool("wrk")
    res = subprocess.run(
        [wrk, "-t2", "-c8", "-d3s", "--latency", "-s", str(LUA_SCRIPT), f"{lb.url}/predict"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "Non-2xx" not in out and "Socket errors" not in out, out
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])  # type: ignore[index]
    total = int(re.search(r"(\d+) requests in", out)[1])  # type: ignore[index]
    assert total >= 300, out
    record_property("wrk_requests_per_second", rate)
    print(f"\nwrk -t2 -c8 -d3s through nginx, 2 replicas, PostgreSQL audit:\n{out}")


class _SilentUpstream(socketserver.ThreadingTCPServer):
    """Reads a whole request, then hangs up without answering: a replica that dies after
    receiving it."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.requests: list[str] = []
        super().__init__(("127.0.0.1", 0), _SilentHandler)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _SilentHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        while length and len(body) < int(length[1]):
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        assert isinstance(self.server, _SilentUpstream)
        self.server.requests.append(head.split(b"\r\n", 1)[0].decode())


@pytest.fixture()
def silent_upstream() -> Iterator[_SilentUpstream]:
    server = _SilentUpstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_post_that_reached_a_replica_is_never_sent_again(
    procs: Processes,
    dockerfile: list[Stage],
    demo_store: Path,
    pg_session_url: str,
    silent_upstream: _SilentUpstream,
) -> None:
    real = start_replica(procs, dockerfile, "real", demo_store, pg_session_url)
    wait_until_ready(f"http://{real.addr}/readyz", real.proc)
    url, nginx, _ = start_nginx(
        procs, [silent_upstream.addr, real.addr], [silent_upstream.addr, real.grpc_addr]
    )
    wait_until_ready(f"{url}/readyz", nginx)

    statuses: Counter[int] = Counter()
    with httpx.Client(base_url=url, timeout=10) as client:
        for i in range(4):
            r = client.post("/predict", json=PREDICT, headers={"X-Request-ID": f"once-{i}"})
            statuses[r.status_code] += 1
            if r.status_code == 502:
                # Sent once, lost, and not replayed on the other replica: it may have been
                # audited there already, had it been a replica that died after the commit.
                assert upstreams_of(r) == [silent_upstream.addr]
                assert r.json()["error"]["code"] == "bad_gateway"
                assert r.headers.get_list("x-request-id") == [f"once-{i}"]
            else:
                assert (r.status_code, upstreams_of(r)) == (200, [real.addr]), r.text[:300]
        posts = sum(1 for line in silent_upstream.requests if line.startswith("POST"))
        assert statuses[502] >= 1 and posts == statuses[502], (statuses, silent_upstream.requests)

        # A GET is safe to repeat: the same failure sends it on to the other replica.
        for _ in range(4):
            r = client.get("/models")
            assert r.status_code == 200, r.text
            assert upstreams_of(r)[-1] == real.addr


def test_killing_a_replica_keeps_serving(
    procs: Processes, dockerfile: list[Stage], demo_store: Path, pg_session_url: str
) -> None:
    lb = start_load_balancer(procs, dockerfile, demo_store, pg_session_url)
    dead, alive = lb.replicas
    with httpx.Client(base_url=lb.url, timeout=10) as client:
        before = {upstreams_of(client.post("/predict", json=PREDICT))[0] for _ in range(6)}
        assert before == {dead.addr, alive.addr}

        procs.signal(dead.proc, signal.SIGKILL)
        dead.proc.popen.wait(10)
        # nginx closes its idle connections to the dead replica once it reads their end.
        dead_port = int(dead.addr.rsplit(":", 1)[1])
        wait_for(lambda: open_connections(dead_port) == 0, 10, "nginx to close them")

        retried = 0
        for i in range(30):
            r = client.post("/predict", json=PREDICT, headers={"X-Request-ID": f"after-{i}"})
            assert r.status_code == 200, r.text
            path = upstreams_of(r)
            assert path[-1] == alive.addr, path
            # A refused connection never delivered the POST, so nginx may try again.
            retried += path == [dead.addr, alive.addr]
        # Passive health: after max_fails=3 the dead replica is no longer tried.
        assert 1 <= retried <= 3, retried


def test_a_replica_stopped_with_sigterm_loses_no_request(
    procs: Processes, dockerfile: list[Stage], demo_store: Path, pg_session_url: str
) -> None:
    """What `docker compose stop app1` does to a replica under traffic.

    nginx retries a POST on the other replica only if the first never received it. One race
    is left that no server can close: at shutdown uvicorn closes its idle keep-alive
    connections, and nginx may have just written a POST into one of them. The client then
    gets the 502 whose body says to look the request id up. This test follows that advice:
    each 502 must have no audit record (the POST never ran), so the client's retry is safe,
    and every request ends with exactly one record.
    """
    lb = start_load_balancer(procs, dockerfile, demo_store, pg_session_url, IABMA_DRAIN_SECONDS="1")
    stopping, staying = lb.replicas
    statuses: Counter[int] = Counter()
    answered_by: Counter[str] = Counter()
    retried: list[str] = []
    with httpx.Client(base_url=lb.url, timeout=10) as client:
        deadline = None
        i = 0
        while deadline is None or time.monotonic() < deadline:
            rid = f"stop-{i}"
            r = client.post("/predict", json=PREDICT, headers={"X-Request-ID": rid})
            statuses[r.status_code] += 1
            if r.status_code == 502:
                assert r.json()["error"]["code"] == "bad_gateway", r.text
                looked_up = client.get("/weights", params={"request_id": rid})
                assert looked_up.status_code == 404, looked_up.text  # never ran: retry
                retried.append(rid)
                r = client.post("/predict", json=PREDICT, headers={"X-Request-ID": rid})
            assert r.status_code == 200, r.text
            answered_by[upstreams_of(r)[-1]] += 1
            i += 1
            if i == 20:
                procs.signal(stopping.proc, signal.SIGTERM)
                deadline = time.monotonic() + 4.0  # drain 1 s, shutdown, then traffic
        assert stopping.proc.popen.wait(10) in (0, -signal.SIGTERM), stopping.proc.tail()
        for rid in retried:
            found = client.get("/weights", params={"request_id": rid})
            assert found.status_code == 200 and found.json()["request_id"] == rid, found.text
    # Exactly one record per request, the retried ones included.
    engine = sqlalchemy.create_engine(pg_session_url)
    try:
        with engine.connect() as conn:
            per_id = dict(
                conn.execute(
                    sqlalchemy.text(
                        "select request_id, count(*) from iabma_audit_log "
                        "where request_id like 'stop-%' group by request_id"
                    )
                ).all()
            )
    finally:
        engine.dispose()
    kept = {unpack_request_id(rid): n for rid, n in per_id.items()}
    assert kept == {f"stop-{k}": 1 for k in range(i)}
    assert set(statuses) <= {200, 502} and statuses[502] <= 1, statuses
    assert answered_by[stopping.addr] > 10, answered_by
    assert answered_by[staying.addr] > answered_by[stopping.addr], answered_by
