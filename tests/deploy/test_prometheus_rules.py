"""deploy/prometheus/iabma-alerts.yml: a Prometheus rule file (promtool checks it when it
is installed) whose every rule names series the server exposes and the thresholds the docs
give."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from app.metrics.alerts import ALERT_Z

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "iabma-alerts.yml"
SOURCES = [*(REPO / "app" / "metrics").glob("*.py")]


def rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    assert set(doc) == {"groups"}
    out = []
    for group in doc["groups"]:
        assert set(group) == {"name", "rules"} and group["rules"]
        out += group["rules"]
    return out


def test_every_rule_is_an_alert_with_a_duration_and_words() -> None:
    for rule in rules():
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule
        assert re.fullmatch(r"[A-Z][A-Za-z]+", rule["alert"])
        assert re.fullmatch(r"\d+[smh]", rule["for"])
        assert rule["labels"]["severity"] in {"warning", "info", "critical"}
        assert {"summary", "description"} <= set(rule["annotations"])
        assert rule["expr"].count("(") == rule["expr"].count(")")


def test_rules_name_series_the_server_exposes_and_the_documented_thresholds() -> None:
    text = "\n".join(p.read_text() for p in SOURCES)
    by_name = {r["alert"]: r["expr"] for r in rules()}
    for expr in by_name.values():
        for series in re.findall(r"\biabma_\w+", expr):
            base = series.removesuffix("_total")
            assert f'"{base}' in text, f"{series} is not a series of app.metrics"
    assert f"> {ALERT_Z:g}" in by_name["IabmaRealisedNllAboveReference"]
    assert "> 0.25" in by_name["IabmaInputDrift"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_rules() -> None:
    done = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
