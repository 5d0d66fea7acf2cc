"""Rows replayed through the served path in process, with no HTTP and no trail: what
``iabma check`` runs on a CSV before a bundle is promoted. The one door from training's
commands into the core."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.plane import check_finite
from app.core.runtime import LoadedModel
from app.errors import InvalidInput
from app.settings import load_settings


@dataclass(frozen=True)
class Refusal:
    """A row the served path refuses: its 1-based row, the field and the fault."""

    row: int
    field: str
    code: str
    message: str


def open_served(store: Path, name: str, version: str | None) -> LoadedModel:
    """The bundle as ``iabma serve`` opens it (verified); raises ``BundleError``."""
    settings = load_settings(
        store=store, model_name=name, model_version=version, audit_enabled=False
    )
    return LoadedModel.open(settings)


def replay(
    model: LoadedModel, rows: list[dict[str, Any]], batch: int = 1000
) -> tuple[dict[int, tuple[Any, int]], list[Refusal]]:
    """Each 0-based row's ``(prediction, index in it)``, and every refused row's faults.

    Rows are JSON-like objects (null for a missing value), decoded, checked and predicted
    exactly as ``POST /predict`` does with ``{"instances": rows}``.
    """
    done: dict[int, tuple[Any, int]] = {}
    refused: list[Refusal] = []
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        try:
            done.update(_predict(model, start, chunk))
        except InvalidInput:
            # Find every refused row of this batch, one row at a time.
            for i, row in enumerate(chunk):
                try:
                    done.update(_predict(model, start + i, [row]))
                except InvalidInput as exc:
                    refused.extend(_refusals(start + i + 1, exc))
    return done, refused


def _predict(
    model: LoadedModel, start: int, chunk: list[dict[str, Any]]
) -> Iterator[tuple[int, tuple[Any, int]]]:
    columns = model.features.columns(chunk, lambda i, name: f"instances[{i}].{name}")
    pred = model.predictor.predict(columns)
    check_finite(model, pred, lambda i: f"instances[{i}]")
    return ((start + i, (pred, i)) for i in range(len(chunk)))


def _refusals(row: int, exc: InvalidInput) -> Iterator[Refusal]:
    for f in exc.faults:
        # "instances[0].age" is the row's field "age".
        field = f.field.split(".", 1)[-1] if "." in f.field else f.field
        yield Refusal(row, field, f.code, f.message)
