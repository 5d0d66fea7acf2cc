"""Every file entry of the manifest takes a SHA-256 as 64 lowercase hex characters only
(a pre-fitted expert's source may have none: it was a Python object, not a file)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from app.bundle.manifest import EnsembleEntry, ExpertEntry, GateEntry, SourceEntry

ENTRIES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (ExpertEntry, {"name": "a", "file": "a.onnx", "kind": "onnx", "inputs": [], "output": "y"}),
    (GateEntry, {"file": "gate.onnx", "combiner": "softmax", "inputs": []}),
    (EnsembleEntry, {"file": "ensemble.onnx", "outputs": []}),
    (SourceEntry, {"uri": "models:/churn/3", "format": "lightgbm"}),
]


@pytest.mark.parametrize(("entry", "fields"), ENTRIES)
@pytest.mark.parametrize("digest", ["A" * 64, "0" * 63, "0" * 65, "g" * 64, " " + "0" * 63])
def test_a_malformed_digest_is_refused(
    entry: type[BaseModel], fields: dict[str, Any], digest: str
) -> None:
    assert entry(sha256="0a" * 32, **fields)
    with pytest.raises(ValidationError, match="64 lowercase hex"):
        entry(sha256=digest, **fields)


def test_a_source_without_a_file_has_no_digest() -> None:
    assert SourceEntry(uri="memory", format="sklearn").sha256 is None
