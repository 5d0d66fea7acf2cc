"""A training file's row as it is (target and dropped columns still in it): refused by
default with ``unknown_feature`` naming the column, accepted and ignored with
``IABMA_IGNORE_TRAINING_COLUMNS`` (docs/data.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.bundle.manifest import MANIFEST_FILE
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness

ROW = {"x1": 0.5, "x2": -0.5}


@pytest.fixture(scope="module")
def store(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo bundle, its manifest saying training read a ``y`` target and dropped ``id``."""
    root = tmp_path_factory.mktemp("training_columns")
    src = bundles.store / "demo" / bundles.demo.version
    dst = root / "demo" / bundles.demo.version
    shutil.copytree(src, dst)
    shutil.copy(bundles.store / "demo" / "LATEST", root / "demo" / "LATEST")
    path = dst / MANIFEST_FILE
    path.chmod(0o644)
    manifest = json.loads(path.read_text())
    manifest["training"]["drop"] = ["id"]
    path.write_text(json.dumps(manifest))
    return root


def predict(store: Path, tmp_path: Path, ignore: bool | None, rows: list[dict]) -> tuple[int, dict]:
    extra = {} if ignore is None else {"ignore_training_columns": ignore}
    with AsgiHarness(make_settings(store, tmp_path, audit_enabled=False, **extra)) as app:
        r = app.post("/predict", json={"instances": rows})
    return r.status_code, r.json()


def test_by_default_the_target_column_is_an_unknown_feature(store: Path, tmp_path: Path) -> None:
    status, body = predict(store, tmp_path, None, [{**ROW, "y": 1}])
    assert status == 422
    assert (body["error"]["code"], body["error"]["field"]) == ("unknown_feature", "instances[0].y")


def test_the_setting_ignores_target_and_dropped_columns_only(store: Path, tmp_path: Path) -> None:
    _, plain = predict(store, tmp_path, True, [ROW])
    status, body = predict(store, tmp_path, True, [{**ROW, "y": 1, "id": "r-17"}])
    assert status == 200, body
    assert body["predictions"] == plain["predictions"]
    status, body = predict(store, tmp_path, True, [{**ROW, "y": 1, "idx": 3}])
    assert status == 422
    assert body["error"]["field"] == "instances[0].idx"
