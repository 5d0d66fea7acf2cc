"""``iabma promote`` and ``iabma rollback``: atomic moves of LATEST, with a history."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app.bundle.pointer import HISTORY_FILE, history
from app.cli.main import main
from tests.support.bundles import Bundles
from training.export.bundle import export_bundle


def copy_store(src: Path, dest: Path, name: str) -> Path:
    shutil.copytree(src / name, dest / name)
    for p in (dest / name).rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dest


def versions(store: Path, name: str) -> list[str]:
    return sorted(p.name for p in (store / name).iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def demo_store(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("published")
    X = bundles.demo.X.iloc[:50]
    export_bundle(bundles.demo.est, store, "demo", X, version="v1")
    export_bundle(bundles.demo.est, store, "demo", X, version="v2", publish=False)
    return store


@pytest.fixture
def store(tmp_path: Path, demo_store: Path) -> Path:
    name = "demo"
    return copy_store(demo_store, tmp_path, name)


def latest(store: Path) -> str:
    return (store / "demo" / "LATEST").read_text().strip()


def test_promote_then_rollback_print_old_and_new(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = latest(store)
    assert main(["promote", "--store", str(store), "--name", "demo", "v2"]) == 0
    assert capsys.readouterr().out.strip() == f"demo: {first} -> v2"
    assert latest(store) == "v2"
    assert history(store / "demo") == [first, "v2"]
    assert main(["rollback", "--store", str(store), "--name", "demo"]) == 0
    assert capsys.readouterr().out.strip() == f"demo: v2 -> {first}"
    assert latest(store) == first
    assert history(store / "demo") == [first]
    # Nothing older is known now: a second rollback is refused and changes nothing.
    assert main(["rollback", "--store", str(store), "--name", "demo"]) == 2
    assert "no earlier version" in capsys.readouterr().err
    assert latest(store) == first


def test_promote_refuses_what_a_server_would_refuse(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = latest(store)
    gate = store / "demo" / "v2" / "gate.onnx"
    gate.write_bytes(gate.read_bytes() + b"\0")
    assert main(["promote", "--store", str(store), "--name", "demo", "v2"]) == 2
    err = capsys.readouterr().err
    assert "version 'v2' fails verification" in err and "gate.onnx has sha256" in err
    assert main(["promote", "--store", str(store), "--name", "demo", "v9"]) == 2
    assert "there are:" in capsys.readouterr().err
    assert main(["promote", "--store", str(store), "--name", "demo", "../x"]) == 2
    assert main(["promote", "--store", str(store), "--name", "nope", "v2"]) == 2
    assert "no bundle named 'nope'" in capsys.readouterr().err
    assert latest(store) == first


def test_the_pointer_is_replaced_never_rewritten(store: Path) -> None:
    pointer = store / "demo" / "LATEST"
    before = os.stat(pointer).st_ino
    assert main(["promote", "--store", str(store), "--name", "demo", "v2"]) == 0
    assert os.stat(pointer).st_ino != before  # a rename: readers see old or new, whole
    assert not [p for p in (store / "demo").iterdir() if p.name.startswith(".LATEST")]
    assert (store / "demo" / HISTORY_FILE).read_text().endswith("v2\n")


def test_rollback_after_a_hand_edit_starts_from_where_latest_is(store: Path) -> None:
    first = latest(store)
    (store / "demo" / "LATEST").write_text("v2\n")  # moved by hand, not recorded
    assert main(["rollback", "--store", str(store), "--name", "demo"]) == 0
    assert latest(store) == first


def test_a_copy_under_another_name_is_refused(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(store / "demo" / "v2", store / "demo" / "v3")
    assert main(["promote", "--store", str(store), "--name", "demo", "v3"]) == 2
    assert "says version 'v2', but the bundle lives in 'v3'" in capsys.readouterr().err


def test_train_can_stage_a_version_for_promotion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    args = ["--store", str(store), "--name", "demo"]
    assert main(["train", "--dataset", "simulation", *args, "--quiet", "--no-publish"]) == 0
    (staged,) = versions(store, "demo")
    assert f"serve it with: iabma promote {' '.join(args)} {staged}" in capsys.readouterr().out
    assert not (store / "demo" / "LATEST").exists()
    assert main(["promote", *args, staged]) == 0
    assert capsys.readouterr().out.strip() == f"demo: (none) -> {staged}"
    assert latest(store) == staged
