"""docker-compose.yml, validated and resolved by `docker-compose config` (no engine needed),
then checked against the Dockerfile, the nginx template and the app's own settings."""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.settings import Settings, load_settings
from tests.support.deploy import (
    COMPOSE_FILE,
    NGINX_TEMPLATE,
    REPO,
    Stage,
    clean_env,
    exec_form,
    template_variables,
)
from tests.support.services import require_tool

APPS = ("app1", "app2")


HASH_KEY = "compose-test-hash-key-0123456789"


def run_compose_config(**env: str) -> subprocess.CompletedProcess[str]:
    # Only PATH and HOME from the caller: its IABMA_* or POSTGRES_* must not change the result.
    return subprocess.run(
        [require_tool("docker-compose"), "--file", str(COMPOSE_FILE), "config"],
        cwd=REPO, env=clean_env(**env), capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


def compose_config(**env: str) -> dict[str, Any]:
    res = run_compose_config(**{"IABMA_AUDIT_HASH_KEY": HASH_KEY, **env})
    assert res.returncode == 0, f"docker-compose config failed:\n{res.stderr}"
    config = yaml.safe_load(res.stdout)
    assert isinstance(config, dict)
    return config


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return compose_config()


def test_services_are_nginx_two_replicas_and_postgres(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {"nginx", *APPS, "postgres"}
    one, two = (dict(services[a]) for a in APPS)
    # The replicas come from one anchor and may differ in their network address only.
    assert one.pop("networks") != two.pop("networks")
    assert one == two
    assert Path(one["build"]["context"]) == REPO
    for app in APPS:
        assert "ports" not in services[app], f"{app} must be reached through nginx only"
    assert services["nginx"]["ports"], "nginx publishes no port"


def test_replicas_mount_the_store_read_only(
    config: dict[str, Any], dockerfile: list[Stage]
) -> None:
    store = dockerfile[-1].env()["IABMA_STORE"]
    for app in APPS:
        service = config["services"][app]
        mounts = [v for v in service["volumes"] if v["target"] == store]
        assert len(mounts) == 1, service["volumes"]
        assert mounts[0]["type"] == "bind" and mounts[0]["read_only"] is True
        assert Path(mounts[0]["source"]) == REPO / "models_store"
        assert service["environment"]["IABMA_STORE"] == store
        assert service["read_only"] is True, "only mounts and tmpfs should be writable"


def test_replicas_share_the_postgres_audit_trail(config: dict[str, Any]) -> None:
    from sqlalchemy.engine import make_url

    services = config["services"]
    pg = services["postgres"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    pg_env = pg["environment"]
    urls = {services[a]["environment"]["IABMA_AUDIT_URL"] for a in APPS}
    assert len(urls) == 1, "the replicas must write one trail"
    url = make_url(urls.pop())
    assert url.drivername == "postgresql+psycopg"
    assert (url.host, url.port) == ("postgres", 5432)
    assert url.username == pg_env["POSTGRES_USER"] and url.password == pg_env["POSTGRES_PASSWORD"]
    assert url.database == pg_env["POSTGRES_DB"]
    for app in APPS:
        assert services[app]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_replica_environment_is_valid_app_settings(
    config: dict[str, Any], dockerfile: list[Stage], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = config["services"]["app1"]["environment"]
    known = {f"IABMA_{name.upper()}" for name in Settings.model_fields}
    # Settings ignore unknown variables, so a misspelt one would silently do nothing.
    assert {k for k in env if k.startswith("IABMA_")} <= known
    for key in [k for k in os.environ if k.startswith("IABMA_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))
    settings = load_settings()
    assert settings.audit_url.startswith("postgresql+psycopg://")
    assert settings.model_version is None
    assert settings.drain_seconds > 0
    # Docker kills a replica after stop_grace_period: draining, then the graceful shutdown
    # and the audit flush, must all fit in it.
    cmd = exec_form(dockerfile[-1].last("CMD").args)
    graceful = float(cmd[cmd.index("--timeout-graceful-shutdown") + 1])
    stop_grace = config["services"]["app1"]["stop_grace_period"]
    assert stop_grace.endswith("s")
    assert float(stop_grace[:-1]) >= settings.drain_seconds + graceful + 5, stop_grace


def test_nginx_gets_the_template_and_every_variable_it_uses(
    config: dict[str, Any], dockerfile: list[Stage]
) -> None:
    services = config["services"]
    nginx = services["nginx"]
    assert nginx["image"].startswith("nginx:") and nginx["image"] != "nginx:latest"
    (mount,) = nginx["volumes"]
    assert Path(mount["source"]) == NGINX_TEMPLATE and mount["read_only"] is True
    # The image renders templates/<x>.template to conf.d/<x>; default.conf replaces its
    # stock server.
    assert mount["target"] == "/etc/nginx/templates/default.conf.template"
    env = nginx["environment"]
    needed, _ = template_variables(NGINX_TEMPLATE.read_text(encoding="utf-8"))
    assert needed <= set(env), needed - set(env)
    cmd = exec_form(dockerfile[-1].last("CMD").args)
    port = cmd[cmd.index("--port") + 1]
    assert {env["NGINX_UPSTREAM_1"], env["NGINX_UPSTREAM_2"]} == {f"{a}:{port}" for a in APPS}
    for app in APPS:
        assert nginx["depends_on"][app]["condition"] == "service_healthy"


def test_nginx_and_replicas_refuse_the_same_body_size() -> None:
    default = Settings.model_fields["max_body_bytes"].default
    for given, expected in ((None, default), ("2097152", 2097152)):
        extra = {"IABMA_MAX_BODY_BYTES": given} if given else {}
        services = compose_config(**extra)["services"]
        sizes = {int(services[a]["environment"]["IABMA_MAX_BODY_BYTES"]) for a in APPS}
        assert sizes == {expected}
        assert int(services["nginx"]["environment"]["NGINX_MAX_BODY_BYTES"]) == expected


def test_only_nginx_may_set_forwarded_headers(config: dict[str, Any]) -> None:
    services = config["services"]
    backend = config["networks"]["backend"]
    assert backend["internal"] is True, "replicas and database need no route out"
    subnet = ipaddress.ip_network(backend["ipam"]["config"][0]["subnet"])
    nginx_ip = ipaddress.ip_address(services["nginx"]["networks"]["backend"]["ipv4_address"])
    addresses = {nginx_ip}
    for app in APPS:
        assert services[app]["environment"]["FORWARDED_ALLOW_IPS"] == str(nginx_ip)
        addresses.add(ipaddress.ip_address(services[app]["networks"]["backend"]["ipv4_address"]))
    assert len(addresses) == 3 and all(a in subnet for a in addresses)


def test_the_audit_hash_key_is_required_and_shared() -> None:
    res = run_compose_config()
    assert res.returncode != 0 and "set IABMA_AUDIT_HASH_KEY" in res.stderr
    config = compose_config()
    keys = {config["services"][a]["environment"]["IABMA_AUDIT_HASH_KEY"] for a in APPS}
    assert keys == {HASH_KEY}
