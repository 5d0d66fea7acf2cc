"""Both ways ``/metrics`` is served keep its keys: the main port's route and the port of its
own (``IABMA_METRICS_PORT``), which answers ``/metrics`` only, with ``IABMA_METRICS_KEYS``,
and binds loopback unless ``IABMA_METRICS_HOST`` says otherwise."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import SettingsError, load_settings
from tests.support.bundles import Bundles
from tests.support.harness import UvicornProcess
from tests.support.metrics import parse
from tests.support.services import free_port, wait_for

API, METRICS = "port-api-key", "port-metrics-key"


def listening(port: int) -> set[str]:
    """The local addresses a socket listens on ``port`` at, from /proc/net/tcp."""
    found = set()
    with open("/proc/net/tcp", encoding="ascii") as fh:
        for line in fh.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def server(bundles: Bundles, tmp: Path, port: int | None, **env: str) -> UvicornProcess:
    settings = {
        "IABMA_STORE": str(bundles.store), "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_URL": f"sqlite:///{tmp / 'audit.db'}", "IABMA_API_KEYS": API,
        "IABMA_LOG_LEVEL": "INFO", **env,
    }  # fmt: skip
    if port is not None:
        settings["IABMA_METRICS_PORT"] = str(port)
    return UvicornProcess(settings, cwd=tmp)


@pytest.fixture(scope="module")
def own_port(
    bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[UvicornProcess, str]]:
    port = free_port()
    with server(bundles, tmp_path_factory.mktemp("port"), port, IABMA_METRICS_KEYS=METRICS) as s:
        s.wait_ready()
        yield s, f"http://127.0.0.1:{port}"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_the_port_of_its_own_needs_a_metrics_key(own_port: tuple[UvicornProcess, str]) -> None:
    main, url = own_port
    body = {"instances": [{"x1": 0.1, "x2": 0.2}]}
    assert httpx.post(main.base_url + "/predict", json=body, headers=bearer(API)).status_code == 200
    with httpx.Client(base_url=url, timeout=10) as c:
        bare = c.get("/metrics")
        assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"
        assert bare.json()["error"]["field"] == "header Authorization"
        assert "iabma_" not in bare.text
        assert c.get("/metrics", headers=bearer("guess")).status_code == 401
        other = c.get("/metrics", headers=bearer(API))
        assert other.status_code == 403 and "metrics role" in other.json()["error"]["message"]
        for path in ("/", "/favicon.ico", "/metrics/", "/anything"):
            assert c.get(path).status_code == 401, path  # the key first: nothing is told
            r = c.get(path, headers=bearer(METRICS))
            assert r.status_code == 404 and r.json()["error"]["field"] == "path", path
        posted = c.post("/metrics", headers=bearer(METRICS))
        assert posted.status_code == 405 and posted.json()["error"]["field"] == "method"
        assert posted.headers["allow"] == "GET"

        def scraped() -> bool:
            r = c.get("/metrics", headers=bearer(METRICS))
            return r.status_code == 200 and "iabma_http_requests_total{" in r.text

        wait_for(scraped, 15, "the prediction's count on the metrics port")
        ok = c.get("/metrics", headers={"X-API-Key": METRICS})
        samples, _ = parse(ok.text)
        assert samples["iabma_http_requests_total"], "valid text, with the served requests"
        assert c.head("/metrics", headers=bearer(METRICS)).status_code == 405
    assert httpx.get(main.base_url + "/metrics", headers=bearer(METRICS)).status_code == 404


def test_it_binds_loopback_unless_told(
    own_port: tuple[UvicornProcess, str], bundles: Bundles, tmp_path: Path
) -> None:
    port = int(own_port[1].rsplit(":", 1)[1])
    assert listening(port) == {"127.0.0.1"}
    assert load_settings().metrics_host == "127.0.0.1"
    wide = free_port()
    with server(bundles, tmp_path, wide, IABMA_METRICS_HOST="0.0.0.0") as s:
        s.wait_ready()
        assert listening(wide) == {"0.0.0.0"}
        s.terminate()
        _out, err = s.output()
    warned = [json.loads(line)["message"] for line in err.splitlines() if line.startswith("{")]
    assert any("without IABMA_METRICS_KEYS" in m and "0.0.0.0" in m for m in warned), warned


def test_the_main_port_s_route_needs_the_same_key(bundles: Bundles, tmp_path: Path) -> None:
    with server(bundles, tmp_path, None, IABMA_METRICS_KEYS=METRICS) as s:
        s.wait_ready()
        assert httpx.get(s.base_url + "/metrics").status_code == 401
        assert httpx.get(s.base_url + "/metrics", headers=bearer(API)).status_code == 403
        ok = httpx.get(s.base_url + "/metrics", headers=bearer(METRICS))
        assert ok.status_code == 200 and "iabma_" in ok.text


@pytest.mark.parametrize("host", ["", "0.0.0.0/0", "http://0.0.0.0", "a b", "host;rm"])
def test_a_metrics_host_that_is_no_address_stops_start_up(host: str) -> None:
    with pytest.raises(SettingsError, match="IABMA_METRICS_HOST"):
        load_settings(metrics_host=host)
