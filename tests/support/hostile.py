"""A hostile request and the one answer it must get: a 4xx naming the field at fault (or the
success it deserves), never a 5xx. Shared by the hostile corpora of ``/weights`` and the
audit console; requests go out as written (:mod:`tests.support.raw_http`)."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.support.bundles import Trained, make_settings
from tests.support.harness import UvicornHarness
from tests.support.raw_http import RawResponse, raw_request

API, AUDITOR = "hostile-api-key", "hostile-auditor-key"
AUTH = {"Authorization": f"Bearer {AUDITOR}"}


@dataclass(frozen=True)
class Seeded:
    """A served odd-names bundle with four audited predictions, ``<prefix>-0`` to ``-3``."""

    app: UvicornHarness
    numeric: str  # a numeric feature's name
    category: str  # a categorical feature's name
    row: dict[str, str]  # every feature of a held-out row, as text ("" when missing)
    cursor: str  # the cursor of GET /weights?limit=1
    experts: list[str]


@contextmanager
def seeded(store: Path, trained: Trained, tmp: Path, prefix: str) -> Iterator[Seeded]:
    settings = make_settings(
        store, tmp, name=trained.name, api_keys=API, auditor_keys=AUDITOR, audit_payload="full"
    )
    with UvicornHarness(settings) as app:
        for i in range(4):
            body = {"instances": trained.instances(slice(i, i + 2))}
            sent = {"Authorization": f"Bearer {API}", "X-Request-ID": f"{prefix}-{i}"}
            r = app.post("/predict", json=body, headers=sent)
            assert r.status_code == 200, r.text
        page = app.get("/weights", params={"limit": "1"}, headers=AUTH).json()
        kinds = trained.X.dtypes
        numeric = [c for c in trained.X.columns if kinds[c].kind in "if"]
        category = next(c for c in trained.X.columns if c not in numeric)
        first: dict[str, Any] = trained.instances([0])[0]
        row = {k: "" if v is None else str(v) for k, v in first.items()}
        experts = list(page["aggregate"]["experts"])
        yield Seeded(app, numeric[0], category, row, page["next_cursor"], experts)


def b64(text: str) -> str:
    """A cursor's text, encoded as GET /weights encodes one."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@dataclass(frozen=True)
class Case:
    """``target`` is sent as written; ``status`` is the answer's; ``named`` is the field
    the error must name (its JSON ``field``, or the text of an HTML error page), if any."""

    target: str
    status: int
    named: str | None = None
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None


def q(**params: str) -> str:
    """A query string, every name and value percent-encoded."""
    return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in params.items())


def send(base_url: str, case: Case, auth: dict[str, str]) -> RawResponse:
    """``case`` with the ``auth`` headers, unless it sets Authorization itself (an empty
    value sends none)."""
    headers = {} if "Authorization" in case.headers else dict(auth)
    headers.update({k: v for k, v in case.headers.items() if v})
    return raw_request(base_url, case.method, case.target, headers, case.body)


def check(r: RawResponse, case: Case) -> None:
    """The answer is the one the case names, and an error names its field."""
    assert r.status < 500, (case.target[:200], r.status, r.text[:500])
    assert r.status == case.status, (case.target[:200], r.status, r.text[:500])
    if case.named is None or r.status < 400:
        return
    kind = r.headers.get("content-type", "")
    if kind.startswith("application/json"):
        error = json.loads(r.body)["error"]
        if isinstance(error, str):  # the Open Inference Protocol's shape
            assert error.startswith(f"{case.named}: "), (case.target[:200], error)
            return
        fields = [error["field"], *(d["field"] for d in error.get("details", []))]
        assert case.named in fields, (case.target[:200], error)
    else:
        assert kind.startswith("text/html"), (case.target[:200], kind)
        text = html.unescape(r.text)
        assert f"{case.named}: " in text or f"{case.named}:" in text, (
            case.target[:200],
            r.text[-800:],
        )
