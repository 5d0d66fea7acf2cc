"""Every file entry of the manifest takes a SHA-256 as 64 lowercase hex characters only."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from app.bundle.manifest import EnsembleEntry, ExpertEntry, GateEntry

ENTRIES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (ExpertEntry, {"name": "a", "file": "a.onnx", "kind": "onnx", "inputs": [], "output": "y"}),
    (GateEntry, {"file": "gate.onnx", "combiner": "softmax", "inputs": []}),
    (EnsembleEntry, {"file": "ensemble.onnx", "outputs": []}),
]


@pytest.mark.parametrize(("entry", "fields"), ENTRIES)
@pytest.mark.parametrize("digest", ["A" * 64, "0" * 63, "0" * 65, "g" * 64, " " + "0" * 63])
def test_a_malformed_digest_is_refused(
    entry: type[BaseModel], fields: dict[str, Any], digest: str
) -> None:
    assert entry(sha256="0a" * 32, **fields)
    with pytest.raises(ValidationError, match="64 lowercase hex"):
        entry(sha256=digest, **fields)
