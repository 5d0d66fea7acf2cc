"""Data shared by the serving tests: trained bundles, instances, settings, PostgreSQL access.

A plain module rather than conftest.py, so that test modules can import it by a name no
other test directory uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pandas as pd
import psycopg

from app.settings import Settings
from tests.support.services import PG_DSN, schema_of


@dataclass(frozen=True)
class Trained:
    name: str
    est: Any
    X: pd.DataFrame  # held-out rows, raw as the estimator takes them
    version: str

    def instances(self, rows: slice | list[int]) -> list[dict[str, Any]]:
        return instances(self.X.iloc[rows])


def instances(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON instances: NaN and None become null."""
    return [{k: _json_value(v) for k, v in rec.items()} for rec in frame.to_dict(orient="records")]


def _json_value(v: Any) -> Any:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    if isinstance(v, np.generic):
        return v.item()
    return v


@dataclass(frozen=True)
class Bundles:
    store: Path
    demo: Trained
    credit: Trained
    creditcls: Trained


TEST_HASH_KEY = "test-audit-hash-key-0123456789abcdef"


def make_settings(store: Path, audit_dir: Path, name: str = "demo", **kw: Any) -> Settings:
    """Settings for a test: its own SQLite trail unless ``audit_url`` is given."""
    kw.setdefault("audit_url", f"sqlite:///{audit_dir / 'audit.db'}")
    kw.setdefault("log_level", "WARNING")
    # Tests that move LATEST say when the server should look; those that follow it set this.
    kw.setdefault("reload_interval_seconds", 0)
    if str(kw["audit_url"]).startswith("postgresql"):
        kw.setdefault("audit_hash_key", TEST_HASH_KEY)  # a shared trail needs a set key
    return Settings(store=store, model_name=name, **kw)


def pg_count(url: str, table: str = "iabma_audit_log") -> int:
    with psycopg.connect(PG_DSN) as conn:
        row = conn.execute(f'select count(*) from "{schema_of(url)}".{table}').fetchone()
    assert row is not None
    return int(row[0])


AUDITED = ("prediction", "weights", "experts", "uncertainty")


def assert_close(got: Any, want: Any, tol: float = 1e-6, at: str = "") -> None:
    """``got == want`` but for numbers, which may differ by ``tol``: the trail keeps its
    arrays as float32 (app.audit.store.packing), within 1e-7 of the answers served."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), (at, got, want)
        for k in want:
            assert_close(got[k], want[k], tol, f"{at}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (at, got, want)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_close(g, w, tol, f"{at}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert isinstance(got, int | float) and abs(got - want) <= tol, (at, got, want)
    else:
        assert got == want, (at, got, want)


def audited(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's instances as the audit trail keeps them: every part, whatever the
    request's ``include`` left out of the answer."""
    return [{k: item[k] for k in AUDITED} for item in items]


def check_contract(client: Any, name: str, body: Any) -> None:
    """Validate ``body`` against the schema ``name`` of the document ``client`` serves."""
    doc = client.get("/openapi.json").json()
    root = {"components": doc["components"], "$ref": f"#/components/schemas/{name}"}
    jsonschema.Draft202012Validator(root).validate(body)
