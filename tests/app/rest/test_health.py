"""Liveness, readiness (loading, ready, draining on SIGTERM) and GET /models."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness, UvicornHarness, UvicornProcess, harness

Client = AsgiHarness | UvicornHarness


@pytest.fixture(scope="module", params=["asgi", "uvicorn"])
def demo(
    request: pytest.FixtureRequest, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Client]:
    with harness(request.param, make_settings(bundles.store, tmp_path_factory.mktemp("h"))) as h:
        yield h


def test_live_and_ready(demo: Client, bundles: Bundles) -> None:
    assert demo.get("/livez").json() == {"status": "alive"}
    r = demo.get("/readyz")
    assert r.status_code == 200
    assert r.json() == {"status": "ready", "model": "demo", "version": bundles.demo.version}


def test_head_probes_answer_the_status_without_a_body(demo: Client) -> None:
    for path in ("/livez", "/readyz"):
        r = demo.request("HEAD", path)
        assert (r.status_code, r.content) == (200, b""), path
    assert demo.request("HEAD", "/predict").status_code == 405


def test_models_is_the_manifest_summary(demo: Client, bundles: Bundles) -> None:
    manifest = json.loads(
        (bundles.store / "demo" / bundles.demo.version / "manifest.json").read_text()
    )
    r = demo.get("/models")
    assert r.status_code == 200
    body = r.json()
    assert body["version"] == bundles.demo.version and body["name"] == "demo"
    assert [e["name"] for e in body["experts"]] == bundles.demo.est.expert_names_
    for got, want in zip(body["experts"], manifest["experts"], strict=True):
        assert got["metrics"] == want["metrics"] and got["sha256"] == want["sha256"]
        assert "file" not in got
    assert body["metrics"] == manifest["metrics"]
    assert body["gate"]["combiner"] == manifest["gate"]["combiner"]


def test_not_ready_until_a_bundle_is_loaded(bundles: Bundles, tmp_path: Path) -> None:
    # Without its lifespan the app has no bundle yet: the state between start and load.
    with AsgiHarness(make_settings(bundles.store, tmp_path), lifespan=False) as app:
        assert app.get("/livez").status_code == 200
        r = app.get("/readyz")
        assert (r.status_code, r.json()) == (503, {"status": "loading"})
        assert app.get("/v2/health/ready").status_code == 503
        r = app.post("/predict", json={"instances": [{"x1": 1, "x2": 1}]})
        assert r.status_code == 503 and r.json()["error"]["code"] == "not_ready"
        assert app.get("/models").status_code == 503
        assert app.get("/weights", params={"x1": "1", "x2": "1"}).status_code == 503
        assert app.post("/v2/models/demo/infer", json={}).json() == {
            "error": "model: no bundle is loaded yet; retry shortly"
        }


def test_sigterm_drains(bundles: Bundles, tmp_path: Path) -> None:
    env = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_URL": f"sqlite:///{tmp_path / 'audit.db'}",
        "IABMA_DRAIN_SECONDS": "1.5",
    }
    with UvicornProcess(env) as server:
        server.wait_ready()
        url = server.base_url
        server.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 1.0
        while httpx.get(url + "/readyz").status_code == 200:
            assert time.monotonic() < deadline, "/readyz stayed 200 after SIGTERM"
            time.sleep(0.02)
        r = httpx.get(url + "/readyz")
        assert (r.status_code, r.json()) == (503, {"status": "draining"})
        assert httpx.get(url + "/v2/health/ready").status_code == 503
        # Still serving while the load balancer notices.
        p = httpx.post(url + "/predict", json={"instances": [{"x1": 0.1, "x2": 0.2}]})
        assert p.status_code == 200
        code, _, err = server.terminate()
    assert code in (0, -signal.SIGTERM), err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any("draining" in line["message"] for line in lines)
    done = [line for line in lines if line.get("route") == "/predict"]
    assert (
        done and done[-1]["status"] == 200 and done[-1]["request_id"] == p.headers["x-request-id"]
    )


def test_readyz_names_the_kind_of_fault_and_keeps_the_database_s_words_in_the_log(
    bundles: Bundles, pg_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """/readyz is open to anyone: a trail whose database refuses the server's role must not
    tell them the database's host, port or user; the log, read by the operator, does."""
    import psycopg

    from tests.support.services import PG_DSN, schema_of, wait_for

    role = f"w43a_ready_{time.monotonic_ns() % 10**9}"
    schema = schema_of(pg_url)
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'create role "{role}" login')
        conn.execute(f'grant all on schema "{schema}" to "{role}"')
    url = pg_url.replace("postgres@", f"{role}@", 1)
    try:
        settings = make_settings(
            bundles.store, Path("."), audit_url=url, audit_unready_seconds=0.5,
            audit_timeout_seconds=2, log_level="ERROR",
        )  # fmt: skip
        with UvicornHarness(settings) as app:
            body = {"instances": bundles.demo.instances([0])}
            assert app.post("/predict", json=body).status_code == 200
            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                conn.execute(f'alter role "{role}" nologin')
                conn.execute(
                    "select pg_terminate_backend(pid) from pg_stat_activity where usename = %s",
                    (role,),
                )
            app.post("/predict", json=body)  # fails, and starts the writer's streak

            def refused() -> bool:
                # The first failure is the killed connection itself ("cannot be reached");
                # the login refusal shows once the writer reconnects, so keep it writing.
                r = app.get("/readyz")
                if r.status_code == 503 and "refused the login" in r.json()["reason"]:
                    return True
                app.post("/predict", json=body)
                return False

            wait_for(refused, 30, "/readyz 503 naming the refused login")
            ready = app.get("/readyz").json()
            reason = ready["reason"]
            assert ready["status"] == "audit_unavailable"
            assert "the database refused the login" in reason, reason
            for secret in (role, "127.0.0.1", "5432", "FATAL", schema):
                assert secret not in reason, (secret, reason)
            assert app.get("/livez").status_code == 200
        logged = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
        said = [e["message"] for e in logged if e["message"].startswith("not ready: ")]
        assert said and role in said[-1] and "not permitted to log in" in said[-1], said
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(
                "select pg_terminate_backend(pid) from pg_stat_activity where usename = %s",
                (role,),
            )
            conn.execute(f'drop owned by "{role}" cascade')
            conn.execute(f'drop role "{role}"')
