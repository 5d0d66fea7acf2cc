"""GET /metrics: valid Prometheus text, counting what the service did."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterator

import pytest
from app_harness import AsgiHarness, UvicornHarness, harness
from app_support import Bundles, make_settings

Client = AsgiHarness | UvicornHarness
SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_]\w*="(?:[^"\\\n]|\\.)*",?)*)\} (\S+)$'
)
LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\\n]|\\.)*)"')
Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> tuple[Samples, dict[str, str]]:
    """A strict reader of the text format: HELP and TYPE first, then well-formed samples."""
    samples: Samples = defaultdict(list)
    types: dict[str, str] = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in {"counter", "gauge", "histogram"}
            types[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, f"not a Prometheus sample: {line!r}"
        name, labels, value = m.groups()
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        assert family in types, f"{name} has no TYPE line before it"
        samples[name].append((dict(LABEL.findall(labels)), float(value)))
    return samples, types


def value(samples: Samples, name: str, **labels: str) -> float:
    hits = [v for lab, v in samples[name] if all(lab.get(k) == w for k, w in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} samples"
    return hits[0]


@pytest.fixture(params=["asgi", "uvicorn"])
def demo(
    request: pytest.FixtureRequest, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Client]:
    with harness(request.param, make_settings(bundles.store, tmp_path_factory.mktemp("m"))) as h:
        yield h


def test_metrics_count_requests_inference_weights_and_audit(demo: Client, bundles: Bundles) -> None:
    version = bundles.demo.version
    for k in range(3):
        rows = bundles.demo.instances(slice(k, k + 1 + k))  # 1, 2 and 3 rows
        assert demo.post("/predict", json={"instances": rows}).status_code == 200
    assert demo.post("/predict", json={"instances": []}).status_code == 422
    assert demo.get("/weights", params={"x1": "0", "x2": "0"}).status_code == 200

    r = demo.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples, types = parse(r.text)
    for series in samples.values():
        for labels, _ in series:
            assert labels["model_name"] == "demo" and labels["model_version"] == version
    model = {"model_name": "demo", "model_version": version}

    assert types["iabma_http_requests_total"] == "counter"
    assert (
        value(samples, "iabma_http_requests_total", route="/predict", method="POST", status="200")
        == 3
    )
    assert (
        value(samples, "iabma_http_requests_total", route="/predict", method="POST", status="422")
        == 1
    )
    assert types["iabma_http_request_duration_seconds"] == "histogram"
    assert (
        value(samples, "iabma_http_request_duration_seconds_count", route="/predict", status="200")
        == 3
    )

    for expert in bundles.demo.est.expert_names_:
        assert value(samples, "iabma_gate_weight_count", expert=expert) == 6  # 1 + 2 + 3 rows
        total = value(samples, "iabma_gate_weight_bucket", expert=expert, le="+Inf")
        assert total == 6
    # One fused graph per batch: three predictions and one gate probe.
    assert value(samples, "iabma_inference_duration_seconds_count", graph="ensemble") == 4
    weight_sum = sum(
        value(samples, "iabma_gate_weight_sum", expert=e) for e in bundles.demo.est.expert_names_
    )
    assert weight_sum == pytest.approx(6.0)

    assert types["iabma_audit_queue_depth"] == "gauge"
    assert value(samples, "iabma_audit_queue_depth", **model) == 0
    assert value(samples, "iabma_audit_records_total", **model) == 3
    assert 1 <= value(samples, "iabma_audit_commit_duration_seconds_count", **model) <= 3
    assert value(samples, "iabma_predicted_rows_total", route="predict") == 6

    for name, series in samples.items():
        if name.endswith("_bucket"):
            by_series: dict[tuple, list[float]] = defaultdict(list)
            for labels, v in series:
                key = tuple(sorted((k, w) for k, w in labels.items() if k != "le"))
                by_series[key].append(v)
            for counts in by_series.values():
                assert counts == sorted(counts), f"{name} buckets must be cumulative"
                assert not any(math.isnan(c) for c in counts)


def test_metrics_label_values_are_escaped() -> None:
    from app.metrics import Counter

    c = Counter("x_total", "help", ("route",))
    c.inc(("m", 'v"1\\', "/a\nb"))
    (line,) = c.samples()
    assert line == 'x_total{model_name="m",model_version="v\\"1\\\\",route="/a\\nb"} 1'
    assert SAMPLE.match(line)
