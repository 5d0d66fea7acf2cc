"""The loader's steps one at a time, each fault named: finding a version (``LATEST`` or
pinned), reading the manifest (JSON, schema version, schema), checksums, and the checks
of the opened graph against the manifest."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import onnx
import pytest

from app.bundle import loader
from app.bundle.loader import (
    BundleError,
    check_shapes,
    open_bundle,
    read_manifest,
    resolve_version,
    session_options,
    sha256_file,
    verify_files,
)
from app.bundle.manifest import READABLE_VERSIONS, SCHEMA_VERSION
from tests.support.bundles import Bundles


@pytest.fixture
def store(bundles: Bundles, tmp_path: Path) -> Path:
    """A writable copy of the demo bundle in a store of its own."""
    dest = tmp_path / "store"
    shutil.copytree(bundles.store / "demo", dest / "demo")
    for f in dest.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    return dest


def version_dir(store: Path) -> Path:
    return store / "demo" / (store / "demo" / "LATEST").read_text().strip()


def test_latest_or_a_pinned_version_is_found(store: Path) -> None:
    path = version_dir(store)
    assert resolve_version(store, "demo") == path
    assert resolve_version(store, "demo", path.name) == path
    (store / "demo" / "LATEST").write_text(f"  {path.name}\n")  # spaces around are read past
    assert resolve_version(store, "demo") == path


@pytest.mark.parametrize(
    ("name", "version", "said"),
    [
        ("../demo", None, "model name"),
        ("demo", "../x", "model version"),
        ("other", None, "no bundle named 'other'"),
        ("demo", "v9", "version 'v9' of 'demo' does not exist"),
    ],
)
def test_a_version_that_cannot_be_found_is_named(
    store: Path, name: str, version: str | None, said: str
) -> None:
    with pytest.raises(BundleError, match=said):
        resolve_version(store, name, version)


def test_a_latest_pointer_missing_or_unsafe_is_named(store: Path) -> None:
    latest = store / "demo" / "LATEST"
    latest.write_text("../../etc\n")
    with pytest.raises(BundleError, match="version in .*LATEST"):
        resolve_version(store, "demo")
    latest.unlink()
    with pytest.raises(BundleError, match="LATEST is missing: no version of 'demo'"):
        resolve_version(store, "demo")


def test_a_file_is_hashed_whole_across_chunks(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # over 2 MiB: three chunks of 1 MiB
    f = tmp_path / "blob"
    f.write_bytes(data)
    assert sha256_file(f) == hashlib.sha256(data).hexdigest()


def _manifest(path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((path / "manifest.json").read_text())


def test_a_manifest_missing_or_not_json_is_named(store: Path) -> None:
    path = version_dir(store)
    (path / "manifest.json").write_bytes(b"\xff{")
    with pytest.raises(BundleError, match="manifest.json is not valid JSON"):
        read_manifest(path)
    (path / "manifest.json").write_text("{oops")
    with pytest.raises(BundleError, match="is not valid JSON"):
        read_manifest(path)
    (path / "manifest.json").unlink()
    with pytest.raises(BundleError, match="manifest.json is missing"):
        read_manifest(path)


@pytest.mark.parametrize(
    ("found", "said"),
    [
        (READABLE_VERSIONS[0] - 1, "Re-export the bundle"),
        (SCHEMA_VERSION + 1, "Upgrade the server"),
    ],
)
def test_an_unreadable_schema_version_says_what_to_do(store: Path, found: int, said: str) -> None:
    path = version_dir(store)
    data = _manifest(path)
    data["schema_version"] = found
    (path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError) as err:
        read_manifest(path)
    first, last = READABLE_VERSIONS[0], READABLE_VERSIONS[-1]
    assert f"has schema_version {found}; this server reads schema_version {first} to {last}" in str(
        err.value
    )
    assert said in str(err.value)


def test_a_manifest_off_the_schema_names_the_field(store: Path) -> None:
    path = version_dir(store)
    data = _manifest(path)
    data["schema_version"] = True  # a bool is no version: left to the schema
    del data["task"]
    (path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match=r"does not match the manifest schema: .*task"):
        read_manifest(path)
    (path / "manifest.json").write_text("[]")
    with pytest.raises(BundleError, match="manifest: "):
        read_manifest(path)


def test_a_checksum_mismatch_names_both_sums(store: Path) -> None:
    path = version_dir(store)
    m = read_manifest(path)
    (path / m.gate.file).write_bytes(b"not the gate")
    with pytest.raises(BundleError) as err:
        verify_files(path, m)
    actual = hashlib.sha256(b"not the gate").hexdigest()
    assert str(err.value) == (
        f"bundle file {m.gate.file} has sha256 {actual[:12]}..., the manifest says "
        f"{m.gate.sha256[:12]}...: refusing a modified bundle"
    )


def test_a_bundle_copied_under_another_version_is_refused(store: Path) -> None:
    path = version_dir(store)
    moved = path.with_name("v-copy")
    shutil.copytree(path, moved)
    with pytest.raises(BundleError, match="says version .* but the bundle lives in 'v-copy'"):
        open_bundle(moved)


def test_sessions_run_on_the_threads_given() -> None:
    opts = session_options(3)
    assert (opts.intra_op_num_threads, opts.inter_op_num_threads) == (3, 1)
    assert opts.log_severity_level == 3


def _rewrite(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Edit the served graph and record its new checksum, as a forger with the manifest
    would: the checks after the checksum must catch it."""
    m = read_manifest(path)
    file = path / m.ensemble.file
    model = onnx.load(str(file))
    edit(model)
    onnx.save(model, str(file))
    data = _manifest(path)
    data["ensemble"]["sha256"] = sha256_file(file)
    (path / "manifest.json").write_text(json.dumps(data))


def test_a_served_graph_that_lacks_an_output_is_named(store: Path) -> None:
    path = version_dir(store)

    def drop_weights(model: onnx.ModelProto) -> None:
        kept = [o for o in model.graph.output if o.name != "weights"]
        del model.graph.output[:]
        model.graph.output.extend(kept)

    _rewrite(path, drop_weights)
    with pytest.raises(BundleError, match=r"lacks the outputs \['weights'\]"):
        open_bundle(path)


def test_a_graph_onnxruntime_refuses_is_named(store: Path) -> None:
    path = version_dir(store)
    file = path / read_manifest(path).ensemble.file
    file.write_bytes(b"not onnx")
    data = _manifest(path)
    data["ensemble"]["sha256"] = sha256_file(file)
    (path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match="onnxruntime cannot load"):
        open_bundle(path)


def test_shapes_are_checked_against_the_manifest(store: Path) -> None:
    bundle = open_bundle(version_dir(store))
    check_shapes(bundle)  # as exported
    fewer = bundle.manifest.model_copy(update={"experts": bundle.manifest.experts[:-1]})
    n = len(fewer.experts)
    with pytest.raises(BundleError, match=f"outputs {n + 1} weights, the manifest lists {n}"):
        check_shapes(loader.OpenedBundle(bundle.path, fewer, bundle.session))
    target = bundle.manifest.target.model_copy(update={"classes": [0, 1, 2]})
    wider = bundle.manifest.model_copy(update={"target": target})
    with pytest.raises(BundleError, match=r"experts output \(5, 2\), expected \(5, 3\) probab"):
        check_shapes(loader.OpenedBundle(bundle.path, wider, bundle.session))


def test_a_manifest_whose_features_the_graph_does_not_take_is_refused(store: Path) -> None:
    path = version_dir(store)
    data = _manifest(path)
    data["features"].append({**data["features"][0], "name": "extra", "input": "f_extra"})
    (path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match=r"takes inputs \[.*\], the manifest's features are"):
        open_bundle(path)


def test_opening_checks_the_shapes(store: Path) -> None:
    """A manifest that lists a class more than the graph serves is refused on open."""
    path = version_dir(store)
    data = _manifest(path)
    data["target"]["classes"] = [*data["target"]["classes"], 7]
    (path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match=r"expected \(5, 3\) probabilities"):
        open_bundle(str(path))  # a path as text opens as well


def test_a_graph_that_fails_on_missing_values_is_named(store: Path, bundles: Bundles) -> None:
    """Another bundle's graph under this manifest: its inputs are not this one's."""
    demo = open_bundle(version_dir(store))
    credit = open_bundle(bundles.store / "credit" / bundles.credit.version)
    with pytest.raises(BundleError, match="fails on a row of missing values"):
        check_shapes(loader.OpenedBundle(demo.path, demo.manifest, credit.session))


def test_a_regression_graph_with_a_mean_too_many_is_named(bundles: Bundles) -> None:
    """The credit bundle's graph with one more column of expert means than experts (built
    by a Concat on its output): the weights agree with the manifest, the means do not."""
    import onnxruntime as ort
    from onnx import helper

    bundle = open_bundle(bundles.store / "credit" / bundles.credit.version)
    model = onnx.load(str(bundle.path / bundle.manifest.ensemble.file))
    for node in model.graph.node:
        node.output[:] = ["means_raw" if o == "expert_means" else o for o in node.output]
    model.graph.node.append(
        helper.make_node("Concat", ["means_raw", "means_raw"], ["expert_means"], axis=1)
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    bent = loader.OpenedBundle(bundle.path, bundle.manifest, session)
    n = len(bundle.manifest.experts)
    with pytest.raises(BundleError) as err:
        check_shapes(bent)
    assert str(err.value) == (
        f"{bundle.manifest.ensemble.file}: experts output ({2 * n},) means, expected {n}"
    )
