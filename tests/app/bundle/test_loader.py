"""A bundle is served only as exported: every file the manifest lists is checked against its
sha256 before anything is opened, the served graph (``ensemble.onnx``) first among them.

The files are tampered with so that they stay valid ONNX, which onnxruntime loads: only
the checksum stands between such a file and the clients. A byte appended would be caught
by the ONNX parser as well, and would not show that the checksum is read at all.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from app.bundle.loader import BundleError, missing_row, open_bundle, read_manifest
from tests.support.bundles import Bundles


@pytest.fixture
def version(bundles: Bundles, tmp_path: Path) -> Path:
    """A writable copy of the demo bundle's version directory."""
    src = bundles.store / "demo" / bundles.demo.version
    dest = tmp_path / "demo" / bundles.demo.version
    shutil.copytree(src, dest)
    for f in dest.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    return dest


def listed(version: Path) -> list[str]:
    """Every file the manifest lists with a sha256, relative to the version directory."""
    m = read_manifest(version)
    return [m.ensemble.file, m.gate.file, *(e.file for e in m.experts)]


def reweigh(path: Path) -> None:
    """Change the first float weight of an ONNX file, or its doc string when it has none
    (tree ensembles keep theirs in attributes): still a model onnxruntime loads."""
    model = onnx.load(str(path))
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype.kind == "f" and array.size:
            changed = array.copy()
            changed.flat[0] += 1.0
            init.CopyFrom(numpy_helper.from_array(changed, init.name))
            break
    else:
        model.doc_string += " (edited)"
    onnx.save(model, str(path))


def test_an_untouched_copy_opens(version: Path) -> None:
    assert open_bundle(version).manifest.version == version.name


@pytest.mark.parametrize("index", range(7))  # the demo: ensemble, gate, five experts
def test_every_listed_file_is_checked_against_its_sha256(version: Path, index: int) -> None:
    files = listed(version)
    assert len(files) == 7, files
    rel = files[index]
    reweigh(version / rel)
    ort.InferenceSession(str(version / rel), providers=["CPUExecutionProvider"])  # loads
    with pytest.raises(BundleError, match=rf"^bundle file {rel} has sha256 [0-9a-f]{{12}}\.\.\."):
        open_bundle(version)


def test_a_reweighted_served_graph_would_answer_otherwise_and_is_refused(version: Path) -> None:
    """The served graph, edited to answer differently: onnxruntime loads it, the manifest
    still validates, the shapes still match; the checksum alone refuses it."""
    manifest = read_manifest(version)
    served = version / manifest.ensemble.file
    row = missing_row(manifest)
    names = list(manifest.ensemble.outputs)
    before = ort.InferenceSession(str(served), providers=["CPUExecutionProvider"]).run(names, row)
    reweigh(served)
    after = ort.InferenceSession(str(served), providers=["CPUExecutionProvider"]).run(names, row)
    changed = [n for n, b, a in zip(names, before, after, strict=True) if not np.array_equal(b, a)]
    assert changed, "the edit must change what the graph answers"
    with pytest.raises(BundleError, match=rf"{manifest.ensemble.file} has sha256"):
        open_bundle(version)


def test_a_listed_file_replaced_by_a_link_outside_is_refused(version: Path, tmp_path: Path) -> None:
    served = version / read_manifest(version).ensemble.file
    outside = tmp_path / "elsewhere.onnx"
    shutil.copy(served, outside)
    served.unlink()
    served.symlink_to(outside)  # the same bytes, the same sha256, but not the bundle's
    with pytest.raises(BundleError, match="points outside the bundle"):
        open_bundle(version)


def test_a_missing_listed_file_is_named(version: Path) -> None:
    gate = version / read_manifest(version).gate.file
    gate.unlink()
    with pytest.raises(BundleError, match=r"bundle file gate.onnx is missing"):
        open_bundle(version)


def test_a_manifest_that_points_outside_is_refused(version: Path, tmp_path: Path) -> None:
    """A manifest naming a file outside its directory, whose bytes (and sha256) are an
    expert's: the checksum would match, the place does not (the manifest's schema refuses
    it; a link inside the bundle is refused by the loader, above)."""
    file = version / "manifest.json"
    data = json.loads(file.read_text(encoding="utf-8"))
    shutil.copy(version / data["experts"][0]["file"], tmp_path / "outside.onnx")
    data["experts"][0]["file"] = "../../outside.onnx"
    file.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BundleError, match="'../../outside.onnx' must be a relative path inside"):
        open_bundle(version)
