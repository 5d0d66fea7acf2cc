"""IABMA_* settings: defaults, normalisation, and a bad value failing start-up by name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.bundle.loader import BundleError
from app.main import create_app
from app.server import serve
from app.settings import Settings, SettingsError, load_settings
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness, UvicornProcess


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("IABMA_"):
            monkeypatch.delenv(key)


def test_defaults() -> None:
    s = load_settings()
    assert s.store == Path("models_store") and s.model_name == "demo" and s.model_version is None
    assert s.audit_url == "sqlite:///./var/audit.db"
    assert (s.audit_payload, s.unknown_category, s.log_format, s.log_level) == (
        "hash",
        "reject",
        "json",
        "INFO",
    )
    assert (s.max_batch_rows, s.max_body_bytes, s.ort_intra_op_threads) == (1000, 8_388_608, 1)
    assert s.admin_token is None and s.drain_seconds == 0.0


def test_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IABMA_STORE", "/models_store")
    monkeypatch.setenv("IABMA_MODEL_NAME", "credit")
    monkeypatch.setenv("IABMA_MODEL_VERSION", "")
    monkeypatch.setenv("IABMA_AUDIT_URL", "postgresql://u:pw@db:5432/trail")
    monkeypatch.setenv("IABMA_ADMIN_TOKEN", "zebra-9")
    monkeypatch.setenv("IABMA_LOG_LEVEL", "debug")
    s = load_settings()
    assert s.store == Path("/models_store") and s.model_name == "credit" and s.model_version is None
    assert s.audit_url == "postgresql+psycopg://u:pw@db:5432/trail"
    assert s.admin_token is not None and s.admin_token.get_secret_value() == "zebra-9"
    assert "zebra-9" not in repr(s)
    assert s.log_level == "DEBUG"


@pytest.mark.parametrize(
    ("var", "value", "says"),
    [
        ("IABMA_MAX_BATCH_ROWS", "0", "greater than or equal to 1"),
        ("IABMA_MAX_BATCH_ROWS", "lots", "valid integer"),
        ("IABMA_MAX_BODY_BYTES", "10", "greater than or equal to 1024"),
        ("IABMA_AUDIT_PAYLOAD", "everything", "'full', 'hash' or 'off'"),
        ("IABMA_AUDIT_URL", "mysql://db/trail", "SQLite or PostgreSQL"),
        ("IABMA_AUDIT_URL", "sqlite://", "in-memory SQLite"),
        ("IABMA_AUDIT_URL", "not a url", "not a database URL"),
        ("IABMA_AUDIT_URL", "postgresql+asyncpg://db/x", "psycopg"),
        ("IABMA_MODEL_NAME", "../etc", "model name '../etc' must be"),
        ("IABMA_MODEL_VERSION", "a/b", "model version 'a/b' must be"),
        ("IABMA_LOG_LEVEL", "loud", "'DEBUG', 'INFO', 'WARNING' or 'ERROR'"),
        ("IABMA_LOG_FORMAT", "xml", "'json' or 'text'"),
        ("IABMA_ORT_INTRA_OP_THREADS", "0", "greater than or equal to 1"),
        ("IABMA_UNKNOWN_CATEGORY", "ignore", "'reject' or 'missing'"),
        ("IABMA_AUDIT_TIMEOUT_SECONDS", "-1", "greater than 0"),
        ("IABMA_DRAIN_SECONDS", "soon", "valid number"),
    ],
)
def test_bad_setting_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, says: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError) as info:
        create_app()
    message = str(info.value)
    assert message.startswith(f"{var}: ")
    assert says in message


def test_serve_returns_2_on_a_bad_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("IABMA_MAX_BATCH_ROWS", "-5")
    assert serve(port=1) == 2
    assert "iabma serve: error: IABMA_MAX_BATCH_ROWS:" in capsys.readouterr().err


def test_missing_bundle_fails_start_up(bundles: Bundles, tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no bundle named 'nothing'"):
        AsgiHarness(make_settings(bundles.store, tmp_path, "nothing")).__enter__()


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {"IABMA_MAX_BATCH_ROWS": "-1"},
            "IABMA_MAX_BATCH_ROWS: Input should be greater than or equal to 1",
        ),
        ({"IABMA_MODEL_NAME": "absent"}, "no bundle named 'absent'"),
    ],
)
def test_uvicorn_factory_refuses_to_start(
    bundles: Bundles, tmp_path: Path, env: dict[str, str], says: str
) -> None:
    base = {"IABMA_STORE": str(bundles.store), "IABMA_AUDIT_URL": f"sqlite:///{tmp_path / 'a.db'}"}
    with UvicornProcess({**base, **env}) as server:
        code = server.proc.wait(60)
        _, err = server.output()
    assert code != 0
    assert says in err


def test_settings_object_is_injected(
    bundles: Bundles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IABMA_MAX_BATCH_ROWS", "not read when settings are given")
    settings = Settings(
        store=bundles.store,
        model_name="demo",
        audit_url=f"sqlite:///{tmp_path / 'a.db'}",
        max_batch_rows=2,
    )
    with AsgiHarness(settings) as app:
        r = app.post("/predict", json={"instances": [{"x1": 1, "x2": 1}] * 3})
    assert r.status_code == 413
