"""POST /admin/reload: bearer token, atomic swap, and a tampered bundle that is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness, harness
from tests.support.metrics import scrape, total, value

TOKEN = "s3cret-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROW = {"instances": [{"x1": 0.4, "x2": -0.3}]}


def publish(bundles: Bundles, store: Path, version: str) -> Path:
    from training.export.bundle import export_bundle

    return export_bundle(bundles.demo.est, store, "demo", bundles.demo.X.iloc[:50], version=version)


def test_reload_is_disabled_without_a_token(bundles: Bundles, tmp_path: Path) -> None:
    with AsgiHarness(make_settings(bundles.store, tmp_path)) as app:
        r = app.post("/admin/reload", headers=AUTH)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "admin_disabled"
    assert "IABMA_ADMIN_TOKEN" in r.json()["error"]["message"]


@pytest.mark.parametrize("kind", ["asgi", "uvicorn"])
def test_reload_swaps_and_refuses_a_tampered_bundle(
    kind: str, bundles: Bundles, store_copy: Path, tmp_path: Path
) -> None:
    old = bundles.demo.version
    settings = make_settings(store_copy, tmp_path, admin_token=TOKEN)
    with harness(kind, settings) as app:
        samples, _ = scrape(app)
        before = {o: total(samples, "iabma_reloads_total", outcome=o) for o in ("ok", "refused")}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
            r = app.post("/admin/reload", headers=headers)
            assert r.status_code == 401, headers
            assert r.headers["www-authenticate"] == "Bearer"
            assert r.json()["error"]["field"] == "header Authorization"

        r = app.post("/admin/reload", headers=AUTH)
        assert r.json() == {
            "model": "demo",
            "version": old,
            "previous_version": old,
            "changed": False,
        }

        publish(bundles, store_copy, "v-next")
        r = app.post("/admin/reload", headers=AUTH)
        assert r.status_code == 200, r.text
        assert r.json() == {
            "model": "demo",
            "version": "v-next",
            "previous_version": old,
            "changed": True,
        }
        assert app.post("/predict", json=ROW).json()["version"] == "v-next"
        assert app.get("/readyz").json()["version"] == "v-next"
        assert app.get("/models").json()["version"] == "v-next"

        bad = publish(bundles, store_copy, "v-tampered")
        gate = bad / "gate.onnx"
        gate.chmod(0o644)
        gate.write_bytes(gate.read_bytes() + b"\x00")
        r = app.post("/admin/reload", headers=AUTH)
        assert r.status_code == 409
        err = r.json()["error"]
        assert err["code"] == "reload_failed" and err["field"] == "bundle"
        assert "gate.onnx has sha256" in err["message"]
        assert err["message"].endswith("still serving version v-next")
        served = app.post("/predict", json=ROW)
        assert served.status_code == 200 and served.json()["version"] == "v-next"
        assert app.get("/readyz").status_code == 200

        (store_copy / "demo" / "LATEST").write_text("v-missing\n")
        r = app.post("/admin/reload", headers=AUTH)
        assert (
            r.status_code == 409
            and "'v-missing' of 'demo' does not exist" in r.json()["error"]["message"]
        )

        samples, _ = scrape(app)
        after = {o: total(samples, "iabma_reloads_total", outcome=o) for o in ("ok", "refused")}
        assert after["ok"] - before["ok"] == 2
        assert after["refused"] - before["refused"] == 2
        assert value(samples, "iabma_model_refused", model_version="v-missing") == 1
        refused = app.get("/models").json()["rollout"]["refused"]
        assert refused["version"] == "v-missing" and "does not exist" in refused["error"]


def test_pinned_version_stays_pinned(bundles: Bundles, store_copy: Path, tmp_path: Path) -> None:
    old = bundles.demo.version
    publish(bundles, store_copy, "v-newer")
    settings = make_settings(store_copy, tmp_path, admin_token=TOKEN, model_version=old)
    with AsgiHarness(settings) as app:
        assert app.post("/predict", json=ROW).json()["version"] == old
        r = app.post("/admin/reload", headers=AUTH)
        assert r.json()["version"] == old and r.json()["changed"] is False
