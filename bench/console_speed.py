"""The audit console's speed on a trail of 10k audit records (or ``--records`` over
``--days``): its requests' latencies, its weight, and the first paint of ``/audit`` in a
real headless Chromium.

A fresh SQLite trail is filled with ``--records`` records (1-3 rows each, spread over the
last ``--days`` days, a week by default), each the served graph's real answer to a random
input inside the bundle's training range, written through the app's own
:class:`AuditStore`. A uvicorn process
then serves the bundle with an auditor key set, and

- the first ``GET /weights``, which makes the trail's ten-minute sums, is timed once;
- every console request is timed from a client on 127.0.0.1 (``--repeats`` times; median
  and p95), against the 100 ms target;
- ``/audit`` and its assets are weighed (target 200 KB);
- Chromium (Debian's, through Selenium) signs in once, then loads ``/audit`` ``--paints``
  times; the browser's own first-contentful-paint entry is read each time (target 300 ms).

Figures go to ``<out>/console_speed-<UTC>.json`` and ``.md`` and to the terminal.

    .venv/bin/python bench/console_speed.py [--store models_store --name demo]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.speed.bundles import ensure_bundle  # noqa: E402
from bench.speed.trail import request_id, seed, serve  # noqa: E402

KEY = "bench-auditor-key"
TARGET_MS, PAINT_MS, WEIGHT_KB = 100.0, 300.0, 200.0


def time_requests(base: str, info: dict[str, Any], repeats: int) -> tuple[dict[str, Any], float]:
    auth = {"Authorization": f"Bearer {KEY}"}
    expert = info["experts"][0]
    form = "&".join(f"f%3A{f}=0.1" for f in info["features"])
    sweep = info["features"][0]
    with httpx.Client(base_url=base, headers=auth, timeout=600) as client:
        t0 = time.perf_counter()
        cursor = client.get("/weights", params={"limit": "50"}).json()["next_cursor"]
        first_sums_ms = (time.perf_counter() - t0) * 1000
        requests: dict[str, tuple[str, str, str | None]] = {
            "GET /audit": ("GET", "/audit", None),
            "GET /audit?expert": ("GET", f"/audit?expert={expert}", None),
            "GET /audit?cursor (page 2)": ("GET", f"/audit?cursor={cursor}", None),
            "GET /audit?since (last day)": ("GET", "/audit?since=" + _day_ago(), None),
            "GET /audit/record": ("GET", f"/audit/record?request_id={request_id('bench', 123)}",
                                  None),
            "GET /audit/timeline": ("GET", "/audit/timeline", None),
            "GET /audit/timeline?expert": ("GET", f"/audit/timeline?expert={expert}", None),
            "GET /audit/timeline.json": ("GET", "/audit/timeline.json", None),
            "GET /audit/probe": ("GET", "/audit/probe", None),
            "POST /audit/probe": ("POST", "/audit/probe", form),
            "POST /audit/probe + sweep": ("POST", "/audit/probe", f"{form}&sweep={sweep}"),
            "GET /audit/bundle": ("GET", "/audit/bundle", None),
            "GET /audit/static/console.css": ("GET", "/audit/static/console.css", None),
            "GET /audit/static/console.js": ("GET", "/audit/static/console.js", None),
        }  # fmt: skip
        out = {}
        for label, (method, path, body) in requests.items():
            headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
            client.request(method, path, content=body, headers=headers)  # warm
            ms = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                r = client.request(method, path, content=body, headers=headers)
                ms.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, (label, r.status_code, r.text[:300])
            out[label] = {
                "median_ms": statistics.median(ms),
                "p95_ms": float(np.percentile(ms, 95)),
                "bytes": len(r.content),
            }
    return out, first_sums_ms


def _day_ago() -> str:
    return datetime.fromtimestamp(time.time() - 86_400, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def first_paints(base: str, loads: int) -> dict[str, Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    script = "return performance.getEntriesByName('first-contentful-paint')[0]?.startTime"
    nav = "const n = performance.getEntriesByType('navigation')[0]; return [n.responseStart, n.responseEnd, n.domContentLoadedEventEnd];"  # noqa: E501
    try:
        driver.get(base + "/audit/login")
        driver.find_element(By.ID, "key").send_keys(KEY)
        driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
        out: dict[str, Any] = {}
        for path in ("/audit", "/audit/timeline"):
            paints, responses = [], []
            for _ in range(loads):
                driver.get(base + path)
                paints.append(
                    float(WebDriverWait(driver, 10).until(lambda d: d.execute_script(script)))
                )
                responses.append(driver.execute_script(nav))
            out[path] = {
                "first_paint_median_ms": statistics.median(paints),
                "first_paint_min_ms": min(paints),
                "first_paint_max_ms": max(paints),
                "response_end_median_ms": statistics.median(r[1] for r in responses),
                "dom_content_loaded_median_ms": statistics.median(r[2] for r in responses),
                "loads": loads,
            }
        return out
    finally:
        driver.quit()


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Audit console speed, {result['records']} records over {result['days']:g} days "
        f"({result['when']})",
        "",
        f"Machine: {result['machine']}. Requests from a client on 127.0.0.1, "
        f"{result['repeats']} each after one warm-up; target {TARGET_MS:.0f} ms.",
        "",
        f"The first `GET /weights`, which made the ten-minute sums: "
        f"{result['first_sums_ms'] / 1000:.2f} s.",
        "",
        "| request | median ms | p95 ms | bytes | within target |",
        "|---|---:|---:|---:|---|",
    ]
    for label, r in result["requests"].items():
        ok = "yes" if r["p95_ms"] < TARGET_MS else "NO"
        lines.append(
            f"| {label} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | {r['bytes']} | {ok} |"
        )
    lines += [
        "",
        f"Page weight of /audit with its stylesheet and script: {result['page_kb']:.1f} KB "
        f"(target {WEIGHT_KB:.0f} KB).",
        "",
        "| page (headless Chromium) | first paint median ms | min | max | response end ms "
        "| loads |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for path, p in result["paint"].items():
        lines.append(
            f"| {path} | {p['first_paint_median_ms']:.0f} | {p['first_paint_min_ms']:.0f} | "
            f"{p['first_paint_max_ms']:.0f} | {p['response_end_median_ms']:.0f} | {p['loads']} |"
        )
    lines.append(f"\nFirst-paint target for /audit: {PAINT_MS:.0f} ms.")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, default=REPO / "models_store")
    p.add_argument("--name", default="demo")
    p.add_argument("--records", type=int, default=10_000)
    p.add_argument("--days", type=float, default=7.0, help="the records' span, up to now")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--paints", type=int, default=15)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    version_dir = ensure_bundle(args.store, args.name)
    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'audit.db'}"
        t0 = time.perf_counter()
        info = seed(version_dir, url, args.records, args.days, np.random.default_rng(0))
        took = time.perf_counter() - t0
        print(f"seeded {info['records']} records ({info['rows']} rows) in {took:.1f} s")
        with serve(args.store, args.name, url, Path(tmp), auditor_keys=KEY) as base:
            requests, first_sums_ms = time_requests(base, info, args.repeats)
            paint = first_paints(base, args.paints)
    assets = ("GET /audit", "GET /audit/static/console.css", "GET /audit/static/console.js")
    page = sum(requests[k]["bytes"] for k in assets)
    result = {
        "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}",
        "records": info["records"],
        "days": args.days,
        "first_sums_ms": first_sums_ms,
        "repeats": args.repeats,
        "requests": requests,
        "page_kb": page / 1024,
        "paint": paint,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"console_speed-{result['when'].replace(':', '')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    text = markdown(result)
    stem.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    print(f"written: {stem}.json, {stem}.md")


if __name__ == "__main__":
    main()
