"""The audit console over HTTP: every page's HTML, access by key and cookie, the probe
leaving the trail alone, and the drawn series matching the JSON aggregates."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from app.core.access import CONSOLE_COOKIE
from tests.support.bundles import Bundles, make_settings
from tests.support.console import SVG, check_page, seed
from tests.support.harness import UvicornHarness
from tests.support.metrics import scrape, value

API, AUDITOR = "api-key-one", "auditor-key"
HTML = {"Accept": "text/html"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def console(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    settings = make_settings(
        bundles.store,
        tmp_path_factory.mktemp("console"),
        api_keys=API,
        auditor_keys=AUDITOR,
        audit_payload="full",
        drift_min_rows=20,
    )
    with UvicornHarness(settings) as app:
        seed(app, bundles.demo, 40, bearer(API))
        yield app


def pages(app: Any) -> dict[str, str]:
    first = app.get("/weights", params={"limit": "1"}, headers=bearer(AUDITOR)).json()
    rid = first["records"][0]["request_id"]
    return {
        "/audit": "Recent decisions",
        "/audit?expert=poly3": "Recent decisions",
        f"/audit/record?request_id={rid}": f"Record {rid}",
        "/audit/timeline": "Weights over time",
        "/audit/performance": "Performance",
        "/audit/probe": "Probe the gate",
        "/audit/bundle": "The bundle",
        "/audit/login": "Sign in",
    }


def test_every_page_is_well_formed_with_a_title_and_landmarks(console: Any) -> None:
    for path, title in pages(console).items():
        r = console.get(path, headers=bearer(AUDITOR))
        assert r.status_code == 200, (path, r.text)
        assert r.headers["content-type"].startswith("text/html")
        assert r.headers.get("cache-control") == "no-store" or path == "/audit/login"
        doc = check_page(r.text)
        assert title in doc.find("./head/title").text, path
    probe = console.post(
        "/audit/probe",
        content="f%3Ax1=0.3&f%3Ax2=-0.2&sweep=x1",
        headers={**bearer(AUDITOR), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert probe.status_code == 200, probe.text
    check_page(probe.text)
    for failing in ("/audit?expert=nobody", "/audit/record?request_id=absent"):
        r = console.get(failing, headers=bearer(AUDITOR))
        assert r.status_code in (404, 422)
        check_page(r.text)


def test_without_the_auditor_key_the_console_is_refused(console: Any) -> None:
    for path in ("/audit", "/audit/timeline", "/audit/bundle", "/audit/record?request_id=x"):
        bare = console.get(path)
        assert bare.status_code == 401, path
        assert bare.headers["www-authenticate"] == "Bearer"
        assert console.get(path, headers=bearer(API)).status_code == 403, "a prediction key"
        assert console.get(path, headers=bearer("nobody")).status_code == 401
    page = console.get("/audit", headers=HTML)
    assert page.status_code == 401, "a browser gets the sign-in form, still a 401"
    check_page(page.text)
    assert 'id="login-form"' in page.text and "Recent decisions" not in page.text
    probe = console.post("/audit/probe", content="f%3Ax1=0&f%3Ax2=0")
    assert probe.status_code == 401
    assert console.get("/audit/static/console.css").status_code == 200, "assets hold no data"


def test_the_sign_in_form_sets_a_strict_http_only_cookie_for_auditor_keys_only(
    console: Any,
) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    refused = console.post("/audit/login", content=f"key={API}", headers=form)
    assert refused.status_code == 403 and "set-cookie" not in refused.headers
    wrong = console.post("/audit/login", content="key=guess", headers=form)
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    ok = console.post("/audit/login", content=f"key={AUDITOR}", headers=form)
    assert ok.status_code == 303 and ok.headers["location"] == "/audit"
    cookie = ok.headers["set-cookie"]
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/audit"):
        assert attribute.lower() in cookie.lower(), cookie
    session = {"Cookie": f"{CONSOLE_COOKIE}={AUDITOR}"}
    assert console.get("/audit", headers=session).status_code == 200
    assert console.get("/weights", headers=session).status_code == 401, "the cookie is /audit's"
    api_cookie = {"Cookie": f"{CONSOLE_COOKIE}={API}"}
    assert console.get("/audit", headers=api_cookie).status_code == 403
    # Login CSRF: another site's form cannot sign this browser in, even with a valid key.
    for header in ({"Origin": "https://evil.example"}, {"Referer": "https://evil.example/x"}):
        r = console.post("/audit/login", content=f"key={AUDITOR}", headers={**form, **header})
        assert r.status_code == 403 and "set-cookie" not in r.headers, header
        assert "another site" in r.text
    same = {**form, "Origin": console.base_url}
    assert console.post("/audit/login", content=f"key={AUDITOR}", headers=same).status_code == 303


def test_a_probe_answers_like_weights_and_is_not_audited(console: Any) -> None:
    before = console.get("/weights", headers=bearer(AUDITOR)).json()["aggregate"]["records"]
    r = console.post(
        "/audit/probe",
        content="f%3Ax1=0.25&f%3Ax2=-0.5",
        headers={**bearer(AUDITOR), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200, r.text
    doc = check_page(r.text)
    shown = {
        td.get("data-expert"): float(td.get("data-value"))
        for td in doc.iter("td")
        if td.get("class") == "weight"
    }
    gate = console.get("/weights", params={"x1": "0.25", "x2": "-0.5"}, headers=bearer(AUDITOR))
    assert gate.status_code == 200, gate.text
    assert shown == pytest.approx(gate.json()["weights"], abs=1e-12)
    after = console.get("/weights", headers=bearer(AUDITOR)).json()["aggregate"]["records"]
    assert after == before, "a probe never reaches the audit trail"
    bad = console.post(
        "/audit/probe",
        content="f%3Ax1=abc&f%3Ax2=0",
        headers={**bearer(AUDITOR), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert bad.status_code == 422 and "x1" in bad.text


def test_the_sweep_runs_the_gate_over_the_training_range(console: Any, bundles: Bundles) -> None:
    r = console.post(
        "/audit/probe",
        content="f%3Ax1=0.1&f%3Ax2=-0.4&sweep=x2",
        headers={**bearer(AUDITOR), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200, r.text
    doc = check_page(r.text)
    chart = next(s for s in doc.iter(SVG + "svg") if s.get("id") == "sweep-chart")
    drawn = {g.get("data-expert"): g.get("data-values") for g in chart.iter(SVG + "g")}
    drawn.pop(None, None)
    slider = next(i for i in doc.iter("input") if i.get("id") == "sweep-slider")
    xs = [float(v) for v in slider.get("data-x").split()]
    from training.datasets import simulate

    train = simulate(1000, 0).X  # the demo bundle's training rows (tests/app/conftest.py)
    assert xs[0] == pytest.approx(train.x2.min()) and xs[-1] == pytest.approx(train.x2.max())
    frame = bundles.demo.X.iloc[: len(xs)].copy()
    frame["x1"], frame["x2"] = 0.1, xs
    expected = bundles.demo.est.weights(frame)
    for j, name in enumerate(bundles.demo.est.expert_names_):
        got = [float(v) for v in drawn[name].split()]
        np.testing.assert_allclose(got, expected[:, j], atol=1e-5, rtol=0)


@pytest.mark.parametrize("expert", [None, "poly3"])
def test_the_drawn_series_match_the_json_aggregates(console: Any, expert: str | None) -> None:
    params = {"expert": expert} if expert else {}
    r = console.get("/audit/timeline", params=params, headers=bearer(AUDITOR))
    assert r.status_code == 200, r.text
    doc = check_page(r.text)
    data = console.get("/audit/timeline.json", params=params, headers=bearer(AUDITOR)).json()
    aggregate = console.get("/weights", params=params, headers=bearer(AUDITOR)).json()
    buckets = data["timeline"]["buckets"]
    charts = {s.get("id"): s for s in doc.iter(SVG + "svg")}
    for chart_id, key in (("mean-chart", "mean_weight"), ("share-chart", "argmax_share")):
        for g in charts[chart_id].iter(SVG + "g"):
            name = g.get("data-expert")
            if name is None:
                continue
            drawn = [None if v == "-" else float(v) for v in g.get("data-values").split()]
            want = [b["experts"][name][key] if b["experts"][name] else None for b in buckets]
            assert drawn == want, (chart_id, name)
    # The buckets, weighted by their rows, add up to GET /weights' aggregate.
    totals = aggregate["aggregate"]
    assert sum(b["records"] for b in buckets) == totals["records"] > 0
    for name, overall in totals["experts"].items():
        rows = [(b["instances"], b["experts"][name]) for b in buckets if b["experts"][name]]
        n = sum(k for k, _ in rows)
        mean = sum(k * v["mean_weight"] for k, v in rows) / n
        share = sum(k * v["argmax_share"] for k, v in rows) / n
        assert mean == pytest.approx(overall["mean_weight"], abs=1e-12)
        assert share == pytest.approx(overall["argmax_share"], abs=1e-12)


def test_filters_reach_the_table(console: Any) -> None:
    r = console.get("/audit", params={"expert": "poly3"}, headers=bearer(AUDITOR))
    doc = check_page(r.text)
    tops = [td.text for td in doc.iter("td") if td.get("class") == "top-expert"]
    listing = console.get("/weights", params={"expert": "poly3"}, headers=bearer(AUDITOR))
    want = [rec["top_expert"] for rec in listing.json()["records"]][: len(tops)]
    assert tops and set(tops) == {"poly3"} and tops == want
    version = bundles_version(console)
    other = console.get("/audit", params={"version": "no-such"}, headers=bearer(AUDITOR))
    assert "0 records match" in other.text
    same = console.get("/audit", params={"version": version}, headers=bearer(AUDITOR))
    assert "40 records match" in same.text
    late = console.get("/audit", params={"since": "2999-01-01"}, headers=bearer(AUDITOR))
    assert "0 records match" in late.text
    bad = console.get("/audit", params={"since": "yesterday"}, headers=bearer(AUDITOR))
    assert bad.status_code == 422 and "since" in bad.text


def bundles_version(app: Any) -> str:
    return app.get("/weights", params={"limit": "1"}, headers=bearer(AUDITOR)).json()["records"][0][
        "version"
    ]


def test_the_bundle_page_lists_the_store_s_versions(console: Any, bundles: Bundles) -> None:
    r = console.get("/audit/bundle", headers=bearer(AUDITOR))
    doc = check_page(r.text)
    table = next(t for t in doc.iter("table") if t.get("id") == "versions-table")
    rows = [[c.text or "" for c in tr] for tr in table.find("tbody")]
    assert [row[0] for row in rows] == [bundles.demo.version]
    assert rows[0][2] == "LATEST" and rows[0][3] == "yes"


def test_only_the_console_s_sign_in_and_assets_are_open() -> None:
    from app.core.access import Role, presented_key, role_of

    for path in ("/audit/login", "/audit/logout", "/audit/static/console.css"):
        assert role_of(path) is None, path
    for path in ("/audit", "/audit/record", "/audit/timeline.json", "/audit/probe"):
        assert role_of(path) is Role.AUDITOR, path
    cookie = [(b"cookie", f"other=1; {CONSOLE_COOKIE}=a%20key".encode())]
    assert presented_key(cookie, "/audit/timeline") == "a key"
    assert presented_key(cookie, "/weights") is None, "the cookie opens only the console"
    assert presented_key([*cookie, (b"x-api-key", b"header")], "/audit") == "header"


def test_the_performance_page_draws_what_performance_answers(console: Any) -> None:
    """Outcomes for the seeded rows (each row's own label, flipped on every third), then
    the page's tables and charts against GET /performance and /metrics."""
    empty = console.get(
        "/audit/performance", params={"until": "2000-01-01"}, headers=bearer(AUDITOR)
    )
    assert empty.status_code == 200 and "No served row matching the filter" in empty.text
    sent = []
    for k in range(0, 40, 2):
        record = console.get("/weights", params={"request_id": f"seed-{k:04d}"},
                             headers=bearer(AUDITOR)).json()  # fmt: skip
        for i, p in enumerate(record["predictions"]):
            label = p["prediction"]["label"]
            sent.append({"request_id": f"seed-{k:04d}", "row": i,
                         "outcome": 1 - label if (k + i) % 3 == 0 else label})  # fmt: skip
    r = console.post("/feedback", json={"outcomes": sent}, headers=bearer(API))
    assert r.status_code == 200, r.text
    report = console.get("/performance", headers=bearer(AUDITOR)).json()
    page = console.get("/audit/performance", headers=bearer(AUDITOR))
    assert page.status_code == 200, page.text
    doc = check_page(page.text)
    assert f"{len(sent)} served rows with an outcome" in page.text
    for tr in doc.iter("tr"):
        name = tr.get("data-name")
        if name is None:
            continue
        scores = report["mixture"] if name == "mixture" else report["experts"][name]
        for td in tr.iter("td"):
            if td.get("data-score"):
                assert float(td.get("data-value")) == scores[td.get("data-score")], name
    charts = {s.get("id"): s for s in doc.iter(SVG + "svg")}

    def drawn(chart: str) -> dict[str, list[float | None]]:
        series = {}
        for g in charts[chart].iter(SVG + "g"):
            if g.get("data-expert") is not None:
                values = g.get("data-values").split()
                series[g.get("data-expert")] = [None if v == "-" else float(v) for v in values]
        return series

    loss = drawn("loss-chart")
    assert loss["mixture"] == [b["mixture"]["nll"] for b in report["buckets"]]
    assert loss["poly3"] == [b["experts"]["poly3"]["nll"] for b in report["buckets"]]
    trust = drawn("trust-chart")
    for name, bins in report["calibration"].items():
        want = [b["nll"] - b["others_nll"] if b["rows"] else None for b in bins]
        assert trust[name] == pytest.approx(want, abs=1e-12), name
    samples, _ = scrape(console)
    psi = {td.get("data-expert"): td.get("data-value") for td in doc.iter("td")
           if td.get("class") == "psi"}  # fmt: skip
    assert set(psi) == set(report["experts"])
    for name, shown in psi.items():
        got = value(samples, "iabma_weight_drift", model_name="demo", expert=name)
        assert float(shown) == pytest.approx(got, abs=1e-12), name


def test_under_a_root_path_every_link_redirect_and_cookie_keeps_it(
    bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Behind a proxy that mounts the app at /api (uvicorn --root-path /api), a browser
    only ever reaches /api/...: a link, a redirect or a cookie path without the prefix
    would leave the console, or never be sent back."""
    settings = make_settings(
        bundles.store, tmp_path_factory.mktemp("rooted"), api_keys=API, auditor_keys=AUDITOR
    )
    with UvicornHarness(settings, root_path="/api") as app:
        seed(app, bundles.demo, 3, bearer(API))
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        sign_in = app.get("/audit", headers=HTML)
        assert sign_in.status_code == 401
        ok = app.post("/audit/login", content=f"key={AUDITOR}", headers=form)
        assert ok.status_code == 303 and ok.headers["location"] == "/api/audit"
        assert "path=/api/audit" in ok.headers["set-cookie"].lower()
        out = app.post("/audit/logout", headers={"Cookie": f"{CONSOLE_COOKIE}={AUDITOR}"})
        assert out.headers["location"] == "/api/audit/login"
        assert "path=/api/audit" in out.headers["set-cookie"].lower()
        session = {"Cookie": f"{CONSOLE_COOKIE}={AUDITOR}"}
        shown = [sign_in.text]
        visited = (
            "/audit", "/audit/timeline", "/audit/performance", "/audit/probe", "/audit/bundle",
            "/audit/record?request_id=seed-0000", "/audit?expert=x",
        )  # fmt: skip
        for path in visited:
            page = app.get(path, headers=session)
            assert page.status_code in (200, 422), (path, page.text)
            shown.append(page.text)
        for text in shown:
            doc = check_page(text)
            for element in doc.iter():
                for attribute in ("href", "src", "action", "data-href"):
                    link = element.get(attribute) or ""
                    if link.startswith("/"):
                        assert link.startswith("/api/audit"), (attribute, link)
