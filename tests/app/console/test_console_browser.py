"""The audit console in a real headless Chromium (Debian's, through Selenium) against a
real uvicorn process with a seeded audit trail and an auditor key set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.bundles import Bundles
from tests.support.console import seed
from tests.support.harness import UvicornProcess
from tests.support.services import require_tool

API, AUDITOR = "api-key-one", "auditor-key"


def chrome() -> object:
    """Debian's chromium and its driver: a missing one skips locally and fails on CI."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = require_tool("chromium"), require_tool("chromedriver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(driver))


@pytest.fixture(scope="module")
def server(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UvicornProcess]:
    audit = Path(tmp_path_factory.mktemp("browser")) / "audit.db"
    env = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_URL": f"sqlite:///{audit}",
        "IABMA_AUDIT_PAYLOAD": "full",
        "IABMA_API_KEYS": API,
        "IABMA_AUDITOR_KEYS": AUDITOR,
        "IABMA_LOG_LEVEL": "WARNING",
        "IABMA_RELOAD_INTERVAL_SECONDS": "0",
        "IABMA_DRIFT_MIN_ROWS": "20",
    }
    with UvicornProcess(env) as proc:
        proc.wait_ready()
        with httpx.Client(base_url=proc.base_url, timeout=30) as client:
            seed(client, bundles.demo, 60, {"Authorization": f"Bearer {API}"})
        yield proc


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    driver = chrome()
    try:
        yield driver
    finally:
        driver.quit()  # type: ignore[attr-defined]


def follow(d: object, element: object) -> None:
    """Click ``element`` and wait until the page it leads to has replaced this one (a
    script's navigation is not awaited by the click itself).

    The old page is marked with a window variable that a new document does not have. While
    the navigation is under way Chromium may answer a script with errors of any kind
    (a stale element, a node that "does not belong to the document"); they mean "not yet".
    """
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    d.execute_script("window.__iabmaOldPage = true")  # type: ignore[attr-defined]
    element.click()  # type: ignore[attr-defined]
    wait = WebDriverWait(d, 15, ignored_exceptions=(WebDriverException,))
    wait.until(
        lambda drv: drv.execute_script(
            "return window.__iabmaOldPage === undefined && document.readyState === 'complete'"
        )
    )


def auditor_get(server: UvicornProcess, path: str, **params: str) -> dict:
    r = httpx.get(
        server.base_url + path, params=params, headers={"Authorization": f"Bearer {AUDITOR}"}
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_the_console_in_a_browser(server: UvicornProcess, browser: object) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d = browser
    d.get(server.base_url + "/audit")  # type: ignore[attr-defined]
    assert "Sign in" in d.title, "without the key: the sign-in form"
    d.find_element(By.ID, "key").send_keys(API)
    follow(d, d.find_element(By.CSS_SELECTOR, "#login-form button"))
    assert "Sign in" in d.title, "a prediction key does not open the console"
    assert "needs the auditor role" in d.find_element(By.CSS_SELECTOR, ".error").text
    d.find_element(By.ID, "key").send_keys(AUDITOR)
    follow(d, d.find_element(By.CSS_SELECTOR, "#login-form button"))
    assert d.title.startswith("Recent decisions"), d.title
    assert "60 records match" in d.find_element(By.ID, "record-count").text
    expected = [e["message"] for e in d.get_log("browser")]  # the 401 and 403 above
    assert len(expected) == 2 and all("status of 40" in m for m in expected), expected

    # Filter by the expert on top most often: only its records remain.
    aggregate = auditor_get(server, "/weights")["aggregate"]["experts"]
    expert = max(aggregate, key=lambda e: aggregate[e]["argmax_share"])
    Select(d.find_element(By.ID, "expert")).select_by_value(expert)
    follow(d, d.find_element(By.ID, "apply"))
    tops = [td.text for td in d.find_elements(By.CSS_SELECTOR, "#decisions td.top-expert")]
    listing = auditor_get(server, "/weights", expert=expert, limit="1000")
    assert tops and set(tops) == {expert}
    assert len(tops) == len(listing["records"]) or len(tops) == 50

    # Open a record by clicking its row (not its link): the page shows /weights' weights.
    row = d.find_elements(By.CSS_SELECTOR, "#decisions tbody tr")[1]
    rid = row.find_element(By.CSS_SELECTOR, "a.rid").text
    follow(d, row.find_element(By.CSS_SELECTOR, "td.top-expert"))
    assert d.find_element(By.ID, "request-id").text == rid
    stored = auditor_get(server, "/weights", request_id=rid)
    rows = d.find_elements(By.CSS_SELECTOR, "#record-weights tbody tr")
    assert len(rows) == stored["n_instances"] == len(stored["predictions"])
    for tr, want in zip(rows, stored["predictions"], strict=True):
        cells = tr.find_elements(By.CSS_SELECTOR, "td.weight")
        shown = {
            c.get_attribute("data-expert"): float(c.get_attribute("data-value")) for c in cells
        }
        assert shown == want["weights"]
        for c in cells:
            assert float(c.text) == pytest.approx(
                want["weights"][c.get_attribute("data-expert")], abs=5e-7
            )

    # Probe the gate by keyboard-free form filling: the same weights as /weights?<features>.
    follow(d, d.find_element(By.LINK_TEXT, "Probe the gate"))
    d.find_element(By.CSS_SELECTOR, "[data-feature='x1']").send_keys("0.7")
    d.find_element(By.CSS_SELECTOR, "[data-feature='x2']").send_keys("-0.25")
    Select(d.find_element(By.ID, "sweep")).select_by_value("x1")
    follow(d, d.find_element(By.ID, "run-probe"))
    gate = auditor_get(server, "/weights", x1="0.7", x2="-0.25")
    cells = d.find_elements(By.CSS_SELECTOR, "#probe-weights td.weight")
    shown = {c.get_attribute("data-expert"): float(c.get_attribute("data-value")) for c in cells}
    assert shown == pytest.approx(gate["weights"], abs=1e-12)
    assert d.find_element(By.ID, "probe-top").text == gate["top_expert"]
    series = d.find_elements(By.CSS_SELECTOR, "#sweep-chart g.series")
    assert {g.get_attribute("data-expert") for g in series} == set(gate["weights"])
    readout = d.find_element(By.ID, "sweep-readout").text
    assert readout.startswith("at "), "the slider's script ran"
    after = auditor_get(server, "/weights")["aggregate"]["records"]
    assert after == 60, "the probe was not audited"

    for link in ("Weights over time", "Performance", "The bundle"):
        follow(d, d.find_element(By.LINK_TEXT, link))
        assert d.title.startswith(link), d.title

    messages = d.get_log("browser")
    assert not messages, messages


def test_the_performance_page_in_a_browser(server: UvicornProcess, browser: object) -> None:
    """Outcomes for half the seeded predictions; the page's scores, its charts and the
    drift per expert, as Chromium shows them."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sent = []
    for k in range(0, 60, 2):
        record = auditor_get(server, "/weights", request_id=f"seed-{k:04d}")
        for i, p in enumerate(record["predictions"]):
            sent.append({"request_id": f"seed-{k:04d}", "row": i,
                         "outcome": p["prediction"]["label"]})  # fmt: skip
    r = httpx.post(server.base_url + "/feedback", json={"outcomes": sent},
                   headers={"Authorization": f"Bearer {API}"})  # fmt: skip
    assert r.status_code == 200, r.text
    report = auditor_get(server, "/performance")

    d = browser
    d.get(server.base_url + "/audit")  # type: ignore[attr-defined]
    if "Sign in" in d.title:
        d.find_element(By.ID, "key").send_keys(AUDITOR)
        follow(d, d.find_element(By.CSS_SELECTOR, "#login-form button"))
    follow(d, d.find_element(By.LINK_TEXT, "Performance"))
    assert d.title.startswith("Performance"), d.title
    assert d.find_element(By.ID, "row-count").text.startswith(f"{len(sent)} served rows")
    mixture = d.find_element(By.CSS_SELECTOR, "#scores-table tr.mixture td[data-score='nll']")
    assert float(mixture.get_attribute("data-value")) == report["mixture"]["nll"]
    assert float(mixture.text) == pytest.approx(report["mixture"]["nll"], abs=5e-5)
    lines = d.find_elements(By.CSS_SELECTOR, "#loss-chart g.series")
    assert {g.get_attribute("data-expert") for g in lines} == {"mixture", *report["experts"]}
    assert d.find_elements(By.CSS_SELECTOR, "#loss-chart polyline"), "the lines are drawn"
    trust = d.find_elements(By.CSS_SELECTOR, "#trust-chart g.series")
    assert {g.get_attribute("data-expert") for g in trust} == set(report["calibration"])
    psi = d.find_elements(By.CSS_SELECTOR, "#drift-table td.psi")
    assert {c.get_attribute("data-expert") for c in psi} == set(report["experts"])
    assert all(float(c.get_attribute("data-value")) >= 0 for c in psi), "PSI from 20 rows on"
    bars = d.find_elements(By.CSS_SELECTOR, "#drift-chart rect.bar-value")
    assert len(bars) == len(psi)

    Select(d.find_element(By.ID, "version")).select_by_index(1)
    follow(d, d.find_element(By.ID, "apply"))
    assert d.find_element(By.ID, "row-count").text.startswith(f"{len(sent)} served rows")
    messages = d.get_log("browser")  # type: ignore[attr-defined]
    assert not messages, messages


def test_first_paint_is_recorded(server: UvicornProcess, browser: object) -> None:
    """The browser reports a first paint for the console (the benchmark times it)."""
    d = browser
    d.get(server.base_url + "/audit")  # type: ignore[attr-defined]
    from selenium.webdriver.support.ui import WebDriverWait

    script = "return performance.getEntriesByName('first-contentful-paint')[0]?.startTime"
    paint = WebDriverWait(d, 10).until(lambda drv: drv.execute_script(script))
    assert paint > 0


def test_sparse_bursty_traffic_draws_a_loss_chart(server: UvicornProcess, browser: object) -> None:
    """Two bursts: outcomes for some of the rows seeded at start, then new rows with their
    outcomes now. In 200 time buckets nearly all are empty: each burst must still show as
    points, the empty buckets as gaps, and no y label may be cut off at the left."""
    from selenium.webdriver.common.by import By

    headers = {"Authorization": f"Bearer {API}"}
    sent = []
    for k in range(1, 12, 2):  # the first burst: served when the server started
        record = auditor_get(server, "/weights", request_id=f"seed-{k:04d}")
        sent += [{"request_id": f"seed-{k:04d}", "row": i, "outcome": p["prediction"]["label"]}
                 for i, p in enumerate(record["predictions"])]  # fmt: skip
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        for k in range(5):  # the second burst: served now
            r = client.post("/predict", json={"instances": [{"x1": 0.1 * k, "x2": -0.2}]},
                            headers={**headers, "X-Request-ID": f"burst-{k}"})  # fmt: skip
            assert r.status_code == 200, r.text
            label = r.json()["predictions"][0]["prediction"]["label"]
            sent.append({"request_id": f"burst-{k}", "row": 0, "outcome": label})
        assert client.post("/feedback", json={"outcomes": sent}, headers=headers).status_code == 200

    d = browser
    d.get(server.base_url + "/audit/performance?buckets=200")  # type: ignore[attr-defined]
    if "Sign in" in d.title:  # type: ignore[attr-defined]
        d.find_element(By.ID, "key").send_keys(AUDITOR)  # type: ignore[attr-defined]
        follow(d, d.find_element(By.CSS_SELECTOR, "#login-form button"))  # type: ignore[attr-defined]
        d.get(server.base_url + "/audit/performance?buckets=200")  # type: ignore[attr-defined]
    mixture = d.find_element(By.CSS_SELECTOR, "#loss-chart g.series[data-expert='mixture']")  # type: ignore[attr-defined]
    values = mixture.get_attribute("data-values").split()
    assert values.count("-") > len(values) // 2, "most buckets are empty: gaps"
    markers = mixture.find_elements(By.CSS_SELECTOR, "circle.marker")
    assert len(markers) == sum(v != "-" for v in values) >= 2
    assert all(m.size["width"] > 0 and m.is_displayed() for m in markers), "points are drawn"
    for chart in ("loss-chart", "trust-chart"):
        lefts = d.execute_script(  # type: ignore[attr-defined]
            "return [...document.querySelectorAll(arguments[0])].map(t => t.getBBox().x)",
            f"#{chart} g.axis text[text-anchor='end']",
        )
        assert lefts and min(lefts) >= 0, (chart, lefts)
    messages = d.get_log("browser")  # type: ignore[attr-defined]
    assert not messages, messages
