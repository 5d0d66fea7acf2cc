"""The body of ``POST /feedback`` and its answer: outcomes for rows of past predictions.

An item names a prediction by its request id and row, and gives what happened: one of the
bundle's classes (as ``/predict`` returns ``prediction.label``), or the observed number.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

from app.contract.request import REQUEST_ID

Outcome = int | str | float


@dataclass(frozen=True)
class OutcomeItem:
    request_id: str = field(
        metadata={
            "doc": "The request id of the prediction (its X-Request-ID, as /predict echoed it).",
            "pattern": REQUEST_ID.pattern,
        }
    )
    outcome: Outcome = field(
        metadata={
            "doc": "What happened: one of the model's classes, as /predict returns "
            "prediction.label (or its text); for regression, the observed number.",
            "target": True,
        }
    )
    row: int = field(default=0, metadata={"doc": "The row of that request, from 0.", "minimum": 0})


@dataclass(frozen=True)
class FeedbackRequest:
    outcomes: tuple[OutcomeItem, ...] = field(
        metadata={
            "doc": "All stored, or none: any bad item refuses the whole body.",
            "min_items": 1,
            "max_items": "max_rows",
        }
    )


FEEDBACK_KEYS: tuple[str, ...] = tuple(f.name for f in fields(FeedbackRequest))
OUTCOME_KEYS: tuple[str, ...] = tuple(f.name for f in fields(OutcomeItem))
OUTCOME_REQUIRED: tuple[str, ...] = tuple(
    f.name for f in fields(OutcomeItem) if f.default is MISSING
)
OUTCOME_DEFAULTS: dict[str, object] = {
    f.name: f.default for f in fields(OutcomeItem) if f.default is not MISSING
}


@dataclass(frozen=True)
class FeedbackResult:
    accepted: int = field(metadata={"doc": "Outcomes stored by this request."})
    duplicates: int = field(
        metadata={"doc": "Outcomes already stored with the same value (a repeat changes nothing)."}
    )
    poster: str | None = field(
        default=None,
        metadata={
            "doc": "Who the stored outcomes name as their poster: a fingerprint of the key "
            "sent (never the key), or null where the route takes no key. GET /performance "
            "can leave a poster's outcomes out by it."
        },
    )
