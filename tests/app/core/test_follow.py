"""Every worker follows LATEST by itself; a version that fails verification is refused."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from app.bundle.pointer import promote
from tests.support.bundles import Bundles
from tests.support.harness import UvicornProcess
from tests.support.metrics import parse, total
from tests.support.services import wait_for as wait_until
from training.export.bundle import export_bundle

INTERVAL = 0.5
# Opening a bundle in two workers at once on a busy 2-core CI machine took up to 13 s once;
# the tight figure comes from the nginx rollout test (tests/deploy/test_rollout_lb.py).
SWITCH_ALLOWANCE = 30.0


def answers(url: str, n: int = 24) -> set[str]:
    """The versions named by ``n`` answers, over fresh connections (any worker)."""
    seen = set()
    for _ in range(n):
        with httpx.Client(base_url=url, timeout=10) as c:
            r = c.post("/predict", json={"instances": [{"x1": 0.1, "x2": 0.2}]})
            assert r.status_code == 200, r.text
            seen.add(r.json()["version"])
    return seen


def wait_for(url: str, version: str, timeout: float) -> float:
    """Seconds until every answer names ``version``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if answers(url) == {version}:
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"still not all on {version} after {timeout} s: {answers(url)}")


@pytest.mark.slow
def test_two_workers_follow_promotion_and_refuse_a_bad_version(
    bundles: Bundles, store_copy: Path, tmp_path: Path
) -> None:
    est, X = bundles.demo.est, bundles.demo.X.iloc[:50]
    old = bundles.demo.version
    export_bundle(est, store_copy, "demo", X, version="v-good", publish=False)
    bad = export_bundle(est, store_copy, "demo", X, version="v-bad", publish=False)
    env = {
        "IABMA_STORE": str(store_copy),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_ENABLED": "false",
        "IABMA_AUDIT_URL": f"sqlite:///{tmp_path / 'unused.db'}",
        "IABMA_RELOAD_INTERVAL_SECONDS": str(INTERVAL),
    }
    with UvicornProcess(env, ("--workers", "2"), cwd=tmp_path) as served:
        served.wait_ready()
        url = served.base_url
        assert answers(url) == {old}

        promote(store_copy, "demo", "v-good")
        took = wait_for(url, "v-good", timeout=INTERVAL + SWITCH_ALLOWANCE)
        assert httpx.get(url + "/readyz").json()["version"] == "v-good"

        # Tampered after it was written: a server must refuse it, whoever moved the pointer.
        gate = bad / "gate.onnx"
        gate.chmod(0o644)
        gate.write_bytes(gate.read_bytes() + b"\0")
        (store_copy / "demo" / "LATEST").write_text("v-bad\n")
        deadline = time.monotonic() + INTERVAL + SWITCH_ALLOWANCE
        while time.monotonic() < deadline:
            models = [httpx.get(url + "/models").json() for _ in range(8)]
            refused = {
                m["rollout"]["refused"]["version"] for m in models if m["rollout"]["refused"]
            }
            if refused == {"v-bad"} and all(m["rollout"]["refused"] for m in models):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"refusal not visible: {models}")
        assert "gate.onnx has sha256" in models[0]["rollout"]["refused"]["error"]
        assert answers(url) == {"v-good"}  # the old version keeps serving

        def flushed() -> bool:  # both workers' metrics, once each has flushed them
            samples, _ = parse(httpx.get(url + "/metrics").text)
            return (
                total(samples, "iabma_reloads_total", outcome="refused", model_version="v-bad") >= 2
                and total(samples, "iabma_model_refused", model_version="v-bad") == 2
                and total(samples, "iabma_model_served", model_version="v-good") == 2
            )

        wait_until(flushed, 10, "both workers to report the refusal in /metrics")

        _, out, err = served.terminate()
    logged = [line for line in (out + err).splitlines() if "refused version v-bad" in line]
    assert len(logged) == 2, err[-2000:]  # once per worker, not once per check
    assert took <= INTERVAL + SWITCH_ALLOWANCE
