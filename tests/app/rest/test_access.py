"""Access control over real HTTP: API, auditor and metrics keys; CORS; encoded bodies."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.core.access import KeyRing, Role, presented_key, role_of
from app.settings import SettingsError, load_settings
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import UvicornHarness

API, AUDITOR, METRICS = "api-key-one", "auditor-key", "metrics-key"
ROW = {"instances": [{"x1": 0.4, "x2": -0.3}]}


@pytest.fixture(scope="module")
def guarded(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UvicornHarness]:
    settings = make_settings(
        bundles.store,
        tmp_path_factory.mktemp("access"),
        api_keys=f"{API}, api-key-two",
        auditor_keys=AUDITOR,
        metrics_keys=METRICS,
        audit_payload="full",
        cors_origins="https://console.example",
    )
    with UvicornHarness(settings) as app:
        yield app


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize(
    ("method", "path", "key"),
    [
        ("POST", "/predict", API),
        ("POST", "/predict", "api-key-two"),
        ("GET", "/models", API),
        ("GET", "/v2/models/demo", API),
        ("GET", "/weights", AUDITOR),
        ("GET", "/performance", AUDITOR),
        ("GET", "/metrics", METRICS),
    ],
)
def test_each_route_opens_with_its_roles_key_only(
    guarded: UvicornHarness, method: str, path: str, key: str
) -> None:
    body = {"json": ROW} if method == "POST" else {}
    missing = guarded.request(method, path, **body)
    assert missing.status_code == 401, missing.text
    assert missing.headers["www-authenticate"] == "Bearer"
    unknown = guarded.request(method, path, headers=bearer("no-such-key"), **body)
    assert unknown.status_code == 401
    ok = guarded.request(method, path, headers=bearer(key), **body)
    assert ok.status_code == 200, ok.text
    also = guarded.request(method, path, headers={"X-API-Key": key}, **body)
    assert also.status_code == 200
    for other in {API, AUDITOR, METRICS} - {key, "api-key-two"}:
        r = guarded.request(method, path, headers=bearer(other), **body)
        if key == "api-key-two" and other == API:
            continue
        assert r.status_code == 403, (other, r.text)
        assert "role" in (
            r.json()["error"] if path.startswith("/v2") else r.json()["error"]["message"]
        )


def test_refusals_name_the_header_and_use_each_family_s_error_shape(
    guarded: UvicornHarness,
) -> None:
    native = guarded.post("/predict", json=ROW).json()["error"]
    assert native["code"] == "unauthorized" and native["field"] == "header Authorization"
    oip = guarded.post("/v2/models/demo/infer", json={"inputs": []})
    assert oip.status_code == 401 and isinstance(oip.json()["error"], str)
    forbidden = guarded.get("/weights", headers=bearer(API)).json()["error"]
    assert forbidden["code"] == "forbidden" and "auditor role" in forbidden["message"]


def test_feedback_opens_with_an_api_key_or_with_keys_of_its_own(
    guarded: UvicornHarness, bundles: Bundles, tmp_path: Path
) -> None:
    body = {"outcomes": [{"request_id": "absent", "outcome": 1}]}
    assert guarded.post("/feedback", json=body).status_code == 401
    # Past the guard: the body is judged (no such request id).
    assert guarded.post("/feedback", json=body, headers=bearer(API)).status_code == 422
    assert guarded.post("/feedback", json=body, headers=bearer(AUDITOR)).status_code == 403
    settings = make_settings(
        bundles.store, tmp_path, api_keys=API, feedback_keys="outcomes-key", auditor_keys=AUDITOR
    )
    with UvicornHarness(settings) as app:
        assert app.post("/feedback", json=body, headers=bearer("outcomes-key")).status_code == 422
        for other in (API, AUDITOR):
            r = app.post("/feedback", json=body, headers=bearer(other))
            assert r.status_code == 403 and "feedback role" in r.json()["error"]["message"]
        assert app.post("/predict", json=ROW, headers=bearer("outcomes-key")).status_code == 403


def test_probes_and_docs_stay_open(guarded: UvicornHarness) -> None:
    for path in ("/livez", "/readyz", "/v2/health/live", "/v2/health/ready",
                 "/v2/models/demo/ready", "/openapi.json"):  # fmt: skip
        assert guarded.get(path).status_code == 200, path


def test_cors_is_opt_in_and_limited_to_its_origins(
    guarded: UvicornHarness, bundles: Bundles, tmp_path: Path
) -> None:
    pre = {"Origin": "https://console.example", "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization,content-type"}  # fmt: skip
    r = guarded.request("OPTIONS", "/predict", headers=pre)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "https://console.example"
    evil = guarded.request("OPTIONS", "/predict", headers={**pre, "Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in evil.headers
    with UvicornHarness(make_settings(bundles.store, tmp_path)) as plain:
        r = plain.get("/livez", headers={"Origin": "https://console.example"})
        assert "access-control-allow-origin" not in r.headers


def test_key_files_and_both_forms_are_refused_clearly(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# one key per line\nfrom-file-1\nfrom-file-2, from-file-3\n")
    s = load_settings(api_keys_file=keys)
    assert s.keys("api_keys") == ("from-file-1", "from-file-2", "from-file-3")
    with pytest.raises(SettingsError, match="IABMA_API_KEYS and IABMA_API_KEYS_FILE"):
        load_settings(api_keys="x", api_keys_file=keys)
    with pytest.raises(SettingsError, match="IABMA_AUDITOR_KEYS_FILE: cannot read"):
        load_settings(auditor_keys_file=tmp_path / "absent")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SettingsError, match="IABMA_METRICS_KEYS_FILE: .* is empty"):
        load_settings(metrics_keys_file=empty)
    with pytest.raises(SettingsError) as err:
        load_settings(api_keys_file=keys, api_keys="top-secret-value")
    assert "top-secret-value" not in str(err.value)


def test_the_auditor_and_feedback_roles_fall_back_to_the_api_keys() -> None:
    ring = KeyRing.from_settings(load_settings(api_keys="k1"))
    assert set(ring.keys) == {Role.DATA, Role.FEEDBACK, Role.AUDITOR}  # none is left open
    assert ring.roles_of("k1") == {Role.DATA, Role.FEEDBACK, Role.AUDITOR}
    own = KeyRing.from_settings(load_settings(api_keys="k1", feedback_keys="f1"))
    assert own.roles_of("k1") == {Role.DATA, Role.AUDITOR}
    assert own.roles_of("f1") == {Role.FEEDBACK}
    assert not KeyRing.from_settings(load_settings()).enabled


@pytest.mark.parametrize(
    ("path", "role"),
    [
        ("/predict", Role.DATA), ("/models", Role.DATA), ("/v2", Role.DATA),
        ("/v2/models/demo", Role.DATA), ("/v2/models/demo/infer", Role.DATA),
        ("/v2/models/demo/versions/1/infer", Role.DATA), ("/v2/models/demo/ready", None),
        ("/v2/health/ready", None), ("/weights", Role.AUDITOR), ("/audit", Role.AUDITOR),
        ("/audit/probe", Role.AUDITOR), ("/metrics", Role.METRICS), ("/livez", None),
        ("/admin/reload", None), ("/predictx", None),
    ],
)  # fmt: skip
def test_role_of_each_path(path: str, role: Role | None) -> None:
    assert role_of(path) is role


def test_presented_key_forms() -> None:
    assert presented_key([(b"authorization", b"Bearer  abc ")]) == "abc"
    assert presented_key([(b"authorization", b"bearer abc")]) == "abc"
    assert presented_key([(b"authorization", b"Basic abc")]) is None
    assert presented_key([(b"x-api-key", b"k")]) == "k"
    assert presented_key([]) is None


# -- Content-Encoding ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_limit(
    bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UvicornHarness]:
    settings = make_settings(bundles.store, tmp_path_factory.mktemp("enc"), max_body_bytes=4096)
    with UvicornHarness(settings) as app:
        yield app


def post_raw(app: UvicornHarness, body: bytes, encoding: str) -> httpx.Response:
    headers = {"content-type": "application/json", "content-encoding": encoding}
    return app.post("/predict", content=body, headers=headers)


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(gzip.compress, id="gzip"),
        pytest.param(zlib.compress, id="deflate-zlib"),
        pytest.param(lambda b: zlib.compress(b)[2:-4], id="deflate-raw"),
    ],
)
def test_compressed_bodies_are_decoded(small_limit: UvicornHarness, encode: object) -> None:
    assert callable(encode)
    raw = json.dumps(ROW).encode()
    name = "gzip" if encode is gzip.compress else "deflate"
    r = post_raw(small_limit, encode(raw), name)
    assert r.status_code == 200, r.text
    plain = small_limit.post("/predict", json=ROW).json()
    assert r.json()["predictions"] == plain["predictions"]


def test_a_plain_body_labelled_gzip_is_a_400(small_limit: UvicornHarness) -> None:
    r = post_raw(small_limit, json.dumps(ROW).encode(), "gzip")
    assert r.status_code == 400
    assert r.json()["error"] == {
        "code": "invalid_encoding", "field": "body", "message": "body: not valid gzip data"
    }  # fmt: skip


def test_a_zip_bomb_is_a_413_after_decoding(small_limit: UvicornHarness) -> None:
    bomb = gzip.compress(b'{"instances": [' + b" " * 4_000_000 + b"]}", 9)
    assert len(bomb) < 4096  # under the limit as sent; a thousand times over it decoded
    r = post_raw(small_limit, bomb, "gzip")
    assert r.status_code == 413
    assert "decodes to more than 4096 bytes" in r.json()["error"]["message"]


def test_other_encodings_are_a_415(small_limit: UvicornHarness) -> None:
    r = post_raw(small_limit, b"{}", "br")
    assert r.status_code == 415
    err = r.json()["error"]
    assert err["field"] == "header Content-Encoding" and "'br' is not supported" in err["message"]
    truncated = gzip.compress(json.dumps(ROW).encode())[:-12]
    assert post_raw(small_limit, truncated, "gzip").status_code == 400
