"""Schemathesis against a real uvicorn: every operation of the typed ``/openapi.json``.

Requests are generated from the document the server publishes for its bundle, both valid
ones (positive) and ones that break the schema (negative), and each answer is checked: no
5xx, a declared status, content type and headers, and a body that matches its schema; a
request that gets no answer at all is a failure too.
Every case runs to the end and every failure is collected, so one run lists them all with
the request to reproduce each. Seeded (``derandomize``) and bounded in examples, so the
run is the same each time and takes well under a minute and a half.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.bundles import Trained
from tests.support.harness import UvicornProcess

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
MIN_CASES = 500
TIME_BUDGET_S = 90.0
TAKE_INPUT = frozenset(
    {"/predict", "/weights", "/feedback", "/performance", "/v2/models/{name}/infer"}
)


def serve(store: Path, name: str, audit_dir: Path) -> UvicornProcess:
    audit_dir.mkdir()
    env = {
        "IABMA_STORE": str(store),
        "IABMA_MODEL_NAME": name,
        "IABMA_AUDIT_URL": f"sqlite:///{audit_dir / 'audit.db'}",
        "IABMA_AUDIT_PAYLOAD": "full",
        "IABMA_LOG_LEVEL": "WARNING",
    }
    return UvicornProcess(env)


@pytest.fixture
def odd_server(odd_bundle: tuple[Path, Trained], tmp_path: Path) -> Iterator[UvicornProcess]:
    store, _ = odd_bundle
    with serve(store, "odd", tmp_path / "odd") as server:
        server.wait_ready()
        yield server


@pytest.fixture
def regression_server(
    odd_regression: tuple[Path, Trained], tmp_path: Path
) -> Iterator[UvicornProcess]:
    store, _ = odd_regression
    with serve(store, "oddreg", tmp_path / "oddreg") as server:
        server.wait_ready()
        yield server


@dataclass
class Run:
    sent: int = 0
    failures: list[str] = field(default_factory=list)
    statuses: dict[str, Counter[int]] = field(default_factory=dict)


def fuzz(base_url: str, rich: int, plain: int) -> Run:
    """Every operation: its documented examples, then generated cases in both modes,
    ``rich`` of each for the operations that take input and ``plain`` for the others."""
    schema = schemathesis.openapi.from_url(base_url + "/openapi.json")
    session = requests.Session()
    run = Run()
    for result in schema.get_all_operations():
        operation = result.ok()
        strategies = {
            mode.value: operation.as_strategy(generation_mode=mode)
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        }
        documented = operation.get_strategies_from_examples()
        if documented:
            strategies["examples"] = st.one_of(documented)
        statuses = run.statuses.setdefault(operation.label, Counter())
        for label, strategy in strategies.items():
            examples = len(documented) if label == "examples" else plain
            if operation.path in TAKE_INPUT and label != "examples":
                examples = rich
            where = f"{operation.label} [{label}]"
            send(base_url, session, strategy, examples, where, run, statuses)
    return run


def send(
    base_url: str,
    session: requests.Session,
    strategy: st.SearchStrategy[Any],
    examples: int,
    where: str,
    run: Run,
    statuses: Counter[int],
) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def one(case: Any) -> None:
        run.sent += 1
        try:
            response = case.call(base_url=base_url, session=session)
            statuses[response.status_code] += 1
            case.validate_response(response, checks=CHECKS)
        except (AssertionError, FailureGroup, requests.RequestException) as exc:
            curl = case.as_curl_command(base_url=base_url)
            run.failures.append(f"{where}\n{curl}\n{type(exc).__name__}: {exc}")

    one()


@pytest.mark.timeout(240)
def test_every_operation_conforms(
    odd_server: UvicornProcess, regression_server: UvicornProcess
) -> None:
    started = time.monotonic()
    # Classification and regression under odd feature names: every answer shape.
    runs = [
        fuzz(odd_server.base_url, rich=50, plain=8),
        fuzz(regression_server.base_url, rich=25, plain=3),
    ]
    seconds = time.monotonic() - started
    sent = sum(r.sent for r in runs)
    failures = [f for r in runs for f in r.failures]
    for r in runs:
        for op, counts in r.statuses.items():
            print(f"{op}: {dict(sorted(counts.items()))}")
    print(f"schemathesis: {sent} cases ({' + '.join(str(r.sent) for r in runs)}) "
          f"in {seconds:.1f} s, {len(failures)} failures")  # fmt: skip
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures[:30])
    assert sent >= MIN_CASES
    assert seconds <= TIME_BUDGET_S
    for r in runs:  # the data routes were reached, not only refused
        for op in ("POST /predict", "GET /weights", "POST /v2/models/{name}/infer"):
            assert r.statuses[op][200] > 0, (op, r.statuses[op])
