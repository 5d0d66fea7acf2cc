"""GET /metrics: valid Prometheus text that counts what every worker of the server did.

Metric values are the process's (prometheus_client multiprocess mode), and tests build many
apps in one process, so in-process tests compare a scrape after with a scrape before.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from app.metrics import FLUSH_SECONDS, ServiceMetrics
from app.metrics.buffer import HistogramBuffer
from app.metrics.multiprocess import server_dir, sweep_stale_dirs
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness, UvicornHarness, UvicornProcess, harness
from tests.support.metrics import parse, scrape, value
from tests.support.services import free_port, wait_for

Client = AsgiHarness | UvicornHarness


@pytest.fixture(params=["asgi", "uvicorn"])
def demo(
    request: pytest.FixtureRequest, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Client]:
    with harness(request.param, make_settings(bundles.store, tmp_path_factory.mktemp("m"))) as h:
        yield h


def test_metrics_count_requests_inference_weights_and_audit(demo: Client, bundles: Bundles) -> None:
    version = bundles.demo.version
    model = {"model_name": "demo", "model_version": version}
    before, _ = scrape(demo)
    for k in range(3):
        rows = bundles.demo.instances(slice(k, k + 1 + k))  # 1, 2 and 3 rows
        assert demo.post("/predict", json={"instances": rows}).status_code == 200
    assert demo.post("/predict", json={"instances": []}).status_code == 422
    assert demo.get("/weights", params={"x1": "0", "x2": "0"}).status_code == 200
    after, types = scrape(demo)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **model, **labels) - value(before, name, **model, **labels)

    for name, series in after.items():
        if name.startswith("iabma_"):
            for labels, _ in series:
                # Other tests' apps (other bundles) share this process's values.
                assert labels["model_name"] and labels["model_version"], (name, labels)
    assert types["iabma_http_requests_total"] == "counter"
    assert delta("iabma_http_requests_total", route="/predict", method="POST", status="200") == 3
    assert delta("iabma_http_requests_total", route="/predict", method="POST", status="422") == 1
    assert types["iabma_http_request_duration_seconds"] == "histogram"
    assert (
        delta(
            "iabma_http_request_duration_seconds_count",
            route="/predict",
            method="POST",
            status="200",
        )
        == 3
    )
    for expert in bundles.demo.est.expert_names_:
        assert delta("iabma_gate_weight_count", expert=expert) == 6  # 1 + 2 + 3 rows
        assert delta("iabma_gate_weight_bucket", expert=expert, le="+Inf") == 6
    # One fused graph per batch: three predictions and one gate probe.
    assert delta("iabma_inference_duration_seconds_count", graph="ensemble") == 4
    # One client at a time: each prediction ran alone through the batcher, without waiting.
    assert types["iabma_batch_requests"] == "histogram"
    assert delta("iabma_batch_requests_count") == 3
    assert delta("iabma_batch_requests_sum") == 3
    assert delta("iabma_batch_requests_bucket", le="1.0") == 3
    assert delta("iabma_batch_waits_total") == 0
    weight_sum = sum(
        delta("iabma_gate_weight_sum", expert=e) for e in bundles.demo.est.expert_names_
    )
    assert weight_sum == pytest.approx(6.0)

    assert types["iabma_audit_queue_depth"] == "gauge"
    assert value(after, "iabma_audit_queue_depth", **model) == 0
    assert delta("iabma_audit_records_total") == 3
    assert 1 <= delta("iabma_audit_commit_duration_seconds_count") <= 3
    assert delta("iabma_predicted_rows_total", route="predict") == 6
    assert value(after, "iabma_model_served", **model) == 1

    # The usual process and runtime metrics, per live worker.
    assert value(after, "process_resident_memory_bytes") > 10e6
    assert types["process_cpu_seconds_total"] == "counter"
    assert types["python_gc_collections_total"] == "counter"
    assert "python_info" in types

    for name, series in after.items():
        if name.endswith("_bucket"):
            by_series: dict[tuple, list[float]] = defaultdict(list)
            for labels, v in series:
                key = tuple(sorted((k, w) for k, w in labels.items() if k != "le"))
                by_series[key].append(v)
            for counts in by_series.values():
                assert counts == sorted(counts), f"{name} buckets must be cumulative"
                assert not any(math.isnan(c) for c in counts)


def test_metrics_speak_openmetrics_when_asked(demo: Client) -> None:
    r = demo.get("/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.endswith("# EOF\n")


def test_bulk_histogram_flush_equals_one_observe_per_value() -> None:
    """The buffer adds into prometheus_client's bucket values directly; that must expose the
    same buckets, sum and count as calling its observe() once per value."""
    metrics = ServiceMetrics()  # sets up the multiprocess directory
    from prometheus_client import Histogram

    family = Histogram("bulk_check", "h", ("how",), buckets=(0.1, 0.5, 1.0), registry=None)
    values = np.random.default_rng(0).uniform(0, 1.2, 500)
    values[:3] = [0.1, 0.5, 1.0]  # on the bounds: le is inclusive
    buffer = HistogramBuffer(family, (0.1, 0.5, 1.0))
    buffer.observe_many(("bulk",), values[:400])
    for v in values[400:]:
        buffer.observe(("bulk",), float(v))
    buffer.flush()
    for v in values:
        family.labels("plain").observe(float(v))
    samples, _ = parse(metrics.exposition()[0].decode())
    for suffix in ("_bucket", "_sum", "_count"):
        got = {(lab.get("le"), lab["how"]): v for lab, v in samples[f"bulk_check{suffix}"]}
        for (le, how), v in got.items():
            if how == "bulk":
                assert v == pytest.approx(got[le, "plain"], rel=1e-12), (suffix, le)


def test_label_values_are_escaped(demo: Client) -> None:
    odd = 'v"1\\\nx'
    demo.service.metrics.rows.inc(("demo", odd, "predict"), 1)
    text = demo.get("/metrics").text
    assert 'model_version="v\\"1\\\\\\nx"' in text
    parse(text)


def _burst(url: str, n: int) -> None:
    async def run() -> None:
        limits = httpx.Limits(max_keepalive_connections=0)  # new connections reach both workers
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
            sem = asyncio.Semaphore(16)

            async def one(k: int) -> None:
                async with sem:
                    r = await client.post(
                        "/predict", json={"instances": [{"x1": k / n, "x2": -k / n}]}
                    )
                    assert r.status_code == 200, r.text

            await asyncio.gather(*[one(k) for k in range(n)])

    asyncio.run(run())


def test_two_workers_every_scrape_shows_the_same_total(bundles: Bundles, tmp_path) -> None:
    n = 300
    env = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_ENABLED": "false",
        "IABMA_AUDIT_URL": f"sqlite:///{tmp_path / 'unused.db'}",
    }
    labels = {"route": "/predict", "method": "POST", "status": "200"}
    with UvicornProcess(env, ("--workers", "2"), cwd=tmp_path) as served:
        served.wait_ready()
        seen: list[float] = []
        with httpx.Client(
            base_url=served.base_url, timeout=10, limits=httpx.Limits(max_keepalive_connections=0)
        ) as scraper:
            import threading

            worker = threading.Thread(target=_burst, args=(served.base_url, n))
            worker.start()
            while worker.is_alive():
                seen.append(value(scrape(scraper)[0], "iabma_http_requests_total", **labels))
                time.sleep(0.05)
            worker.join()
            # While traffic ran, a counter never went backwards, whichever worker answered.
            assert seen == sorted(seen), seen
            wait_for(
                lambda: value(scrape(scraper)[0], "iabma_http_requests_total", **labels) == n,
                FLUSH_SECONDS + 10,
                "every worker to flush its count",
            )

            def workers(samples: Any) -> set[str]:
                return {lab["pid"] for lab, _ in samples["process_resident_memory_bytes"]}

            # A worker still starting on a busy machine has written nothing yet.
            wait_for(lambda: len(workers(scrape(scraper)[0])) == 2, 60, "both workers' files")
            finals = []
            seen_pids = []
            for _ in range(12):
                samples, _ = scrape(scraper)
                finals.append(value(samples, "iabma_http_requests_total", **labels))
                seen_pids.append(len(workers(samples)))
        served.terminate()
    assert finals == [n] * 12, finals
    assert seen_pids == [2] * 12, "both workers' process metrics appear in every scrape"


def test_a_metrics_port_of_its_own_serves_every_worker(bundles: Bundles, tmp_path) -> None:
    port = free_port()
    env = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_ENABLED": "false",
        "IABMA_AUDIT_URL": f"sqlite:///{tmp_path / 'unused.db'}",
        "IABMA_METRICS_PORT": str(port),
        "IABMA_METRICS_HOST": "127.0.0.1",
    }
    with UvicornProcess(env, ("--workers", "2"), cwd=tmp_path) as served:
        served.wait_ready()
        assert httpx.get(served.base_url + "/metrics").status_code == 404  # not on the data port
        _burst(served.base_url, 50)
        labels = {"route": "/predict", "method": "POST", "status": "200"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as scraper:

            def flushed() -> bool:  # the count, and both workers' own process metrics
                samples, _ = scrape(scraper)
                pids = {lab["pid"] for lab, _ in samples.get("process_resident_memory_bytes", [])}
                return (
                    value(samples, "iabma_http_requests_total", **labels) == 50 and len(pids) == 2
                )

            wait_for(flushed, FLUSH_SECONDS + 10, "every worker to flush its metrics")
            samples, _ = scrape(scraper)
        assert len({lab["pid"] for lab, _ in samples["process_resident_memory_bytes"]}) == 2


def test_directories_of_servers_that_are_gone_are_swept(tmp_path) -> None:
    """A killed server and the supervisor of --workers leave their directory behind; the next
    server removes those whose owner is dead or whose pid now names a newer process."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = tmp_path / f"iabma-metrics-{int(gone.stdout)}-12345"
    live = tmp_path / server_dir(os.getpid()).name
    recycled = tmp_path / f"iabma-metrics-{os.getpid()}-1"  # this pid, an older start time
    unrelated = tmp_path / "iabma-metrics-notes"
    for d in (dead, live, recycled, unrelated):
        d.mkdir()
        (d / "counter_1.db").write_bytes(b"x")
    sweep_stale_dirs(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, unrelated.name])
