"""The body of ``POST /predict``: its fields, their options, defaults and limits; and the
rule every request id follows."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Literal, get_args

Format = Literal["rows", "columnar"]
Part = Literal["prediction", "weights", "experts", "uncertainty"]
FeatureValue = float | str | None

FORMATS: tuple[Format, ...] = get_args(Format)
PARTS: tuple[Part, ...] = get_args(Part)
# X-Request-ID, and every request id a body or a query names: it lands in the audit trail
# and in the logs. Python's ``$`` also matches before a final newline, so "id\n" would pass
# ``.match``: ``(?!\n)`` refuses it, whichever of match or fullmatch a caller uses, and the
# pattern stays the ECMA-262 regex JSON Schema reads (where ``$`` is the end already).
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}(?!\n)$")


@dataclass(frozen=True)
class PredictRequest:
    instances: tuple[Mapping[str, FeatureValue], ...] = field(
        metadata={
            "doc": "Rows: every feature of the model, by the name in the training data; "
            "null for a missing value.",
            "items": "Instance",
            "min_items": 1,
            "max_items": "max_rows",
        }
    )
    format: Format = field(
        default="rows",
        metadata={"doc": "rows: one object per instance; columnar: one array per field."},
    )
    include: tuple[Part, ...] = field(
        default=PARTS,
        metadata={"doc": "The parts of the answer to return.", "min_items": 1, "unique": True},
    )


BODY_KEYS: tuple[str, ...] = tuple(f.name for f in fields(PredictRequest))
DEFAULTS: dict[str, object] = {
    f.name: f.default for f in fields(PredictRequest) if f.default is not MISSING
}
