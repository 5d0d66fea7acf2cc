"""The one definition of ``results.json``: method names, metric sets and the schema.

``results.json`` holds, per method, each metric's mean and sd over repetitions, the fit
time, the tuning, and IA-BMA's paired differences with the gate each searched method
shipped (the pydantic models below are the schema). Anything else a run produces goes to
``details.json``. :func:`validate_results` is called before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from training.combiners.names import BENCH_METHODS

#: The nine methods of the paper plus the paper-literal IA-BMA, in the table's order.
METHODS: tuple[str, ...] = BENCH_METHODS

METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("accuracy", "ece", "nll", "brier"),
    "regression": ("rmse", "r2", "nll", "crps", "coverage90"),
}

# A Literal built from the tuple, so the schema cannot drift from the registry.
# mypy needs literal values in Literal[...]; at run time pydantic reads the tuple's values.
MethodName = Literal[BENCH_METHODS]  # type: ignore[valid-type]


class _Strict(BaseModel):
    # strict: "2" is not a rep count; allow_inf_nan=False: NaN is not valid JSON.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Stat(_Strict):
    """Mean and sample standard deviation over repetitions (sd = 0 for a single one)."""

    mean: float
    sd: float = Field(ge=0.0)


class ClassificationScores(_Strict):
    accuracy: Stat
    ece: Stat
    nll: Stat
    brier: Stat


class RegressionScores(_Strict):
    rmse: Stat
    r2: Stat
    nll: Stat
    crps: Stat
    coverage90: Stat


class Tuning(_Strict):
    """How a method was tuned: its search, and its mixture temperature (how, and the
    values fitted over the repetitions; 1 when it has none)."""

    search: str = Field(min_length=1)
    temperature: str = Field(min_length=1)
    temperature_fitted: Stat


class PairedStat(_Strict):
    """The reference's score minus a rival's, over repetitions (paired)."""

    mean: float
    sd: float = Field(ge=0.0)
    wins: int = Field(ge=0)  # repetitions where the reference scored better
    reps: int = Field(ge=1)


class Paired(_Strict):
    reference: MethodName
    metric: Literal["nll"]
    against: dict[MethodName, PairedStat]


class Chosen(_Strict):
    objective: Literal["elbo", "marginal"]
    kl_weight: float = Field(ge=0.0)
    pool_kl_weight: float = Field(default=0.0, ge=0.0)  # the point on the path to the pool


class _Results(_Strict):
    dataset: str = Field(min_length=1)
    reps: int = Field(ge=1)
    fit_seconds: dict[MethodName, Stat] = Field(min_length=1)
    tuning: dict[MethodName, Tuning] | None = None
    paired: Paired | None = None
    shipped: dict[MethodName, list[Literal["network", "stacking"]]] = Field(default_factory=dict)
    chosen: dict[MethodName, list[Chosen]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _same_methods(self) -> _Results:
        methods = set(getattr(self, "methods"))  # noqa: B009 - declared by the subclasses
        if methods != set(self.fit_seconds):
            raise ValueError(
                f"methods {sorted(methods)} and fit_seconds {sorted(self.fit_seconds)} "
                "must name the same methods"
            )
        return self


class ClassificationResults(_Results):
    task: Literal["classification"]
    methods: dict[MethodName, ClassificationScores] = Field(min_length=1)


class RegressionResults(_Results):
    task: Literal["regression"]
    methods: dict[MethodName, RegressionScores] = Field(min_length=1)


Results = Annotated[ClassificationResults | RegressionResults, Field(discriminator="task")]
# TypeAdapter takes a PEP 747 TypeForm (here an Annotated union), which this mypy cannot
# check yet, so the argument goes in as Any and the annotation states what comes out.
AnyResults = ClassificationResults | RegressionResults
_ADAPTER: TypeAdapter[AnyResults] = TypeAdapter(cast(Any, Results))

# The schema's own spelling of the pydantic models, as a check for other tools.
RESULTS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "iabma bench quality results.json",
    **_ADAPTER.json_schema(),
}


class ResultsSchemaError(ValueError):
    """``results.json`` content that does not have the documented form."""


def validate_results(data: dict[str, Any]) -> dict[str, Any]:
    """Check ``data`` against the schema; return it unchanged.

    Raises
    ------
    ResultsSchemaError
        Naming every field that is missing, extra or of the wrong type.
    """
    try:
        _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise ResultsSchemaError(f"results.json does not match its schema:\n{exc}") from None
    return data


def write_schema(path: Path) -> Path:
    """Write :data:`RESULTS_SCHEMA` as JSON to ``path``."""
    path.write_text(json.dumps(RESULTS_SCHEMA, indent=2) + "\n", encoding="utf-8")
    return path
