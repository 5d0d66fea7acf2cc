"""Reading ``/metrics`` in tests: a strict parser of the text format, and sums over it.

prometheus_client's values are per process (multiprocess mode) and tests build many apps
in one process, so in-process tests compare a scrape after with a scrape before.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_]\w*="(?:[^"\\\n]|\\.)*",?)*)\})? (\S+)$'
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
            assert kind in {"counter", "gauge", "histogram", "summary"}
            types[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, f"not a Prometheus sample: {line!r}"
        name, labels, value = m.groups()
        family = re.sub(r"_(bucket|sum|count|total)$", "", name) if name not in types else name
        assert family in types or name in types, f"{name} has no TYPE line before it"
        samples[name].append((dict(LABEL.findall(labels or "")), float(value)))
    return samples, types


def value(samples: Samples, name: str, **labels: str) -> float:
    hits = [v for lab, v in samples[name] if all(lab.get(k) == w for k, w in labels.items())]
    assert len(hits) <= 1, f"{name}{labels}: {len(hits)} samples"
    return hits[0] if hits else 0.0


def scrape(client: Any, url: str = "/metrics") -> tuple[Samples, dict[str, str]]:
    r = client.get(url)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(r.text)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of every sample of ``name`` whose labels include ``labels``."""
    return sum(
        v for lab, v in samples.get(name, []) if all(lab.get(k) == w for k, w in labels.items())
    )


def totals(client: Any, *names: str, **labels: str) -> dict[str, float]:
    """One scrape's sum of each named series, over the samples carrying ``labels``."""
    samples, _ = scrape(client)
    return {name: total(samples, name, **labels) for name in names}
