"""The bundle's manifest: the one schema both sides of the bundle agree on.

``training`` writes a :class:`Manifest` next to the ONNX files and ``app`` validates it on
load. Every model has ``extra="forbid"`` so that a manifest from a newer writer, or a hand
edit with a typo, is refused instead of being half-understood.
"""

from __future__ import annotations

import re
from datetime import datetime
from itertools import pairwise
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from app.bundle.normalise import Normaliser
from app.bundle.reference import MIXTURE_KEY, InputReference, PerformanceReference

SCHEMA_VERSION: Final = 4
# Version 4 added the gate's weight histogram; a version-3 bundle serves without drift.
READABLE_VERSIONS: Final = (3, 4)
MANIFEST_FILE = "manifest.json"
LATEST_FILE = "LATEST"
# Categorical missing values travel through every ONNX graph as this string, so the
# experts' one-hot encoders and the gate see the same token the estimator saw in training.
MISSING_TOKEN = "__missing__"

Task = Literal["classification", "regression"]
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# Graph input names: every converter and runtime accepts these unchanged.
_INPUT_NAME = re.compile(r"^f_[A-Za-z0-9_]{1,120}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_safe_name(value: str, what: str) -> str:
    """Reject names that could escape a directory or break a URL path segment."""
    if not _SAFE_NAME.match(value):
        raise ValueError(
            f"{what} {value!r} must be 1-128 characters of letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def check_sha256(value: str) -> str:
    """Reject a digest that is not 64 lowercase hex characters (a file's SHA-256)."""
    if not _SHA256.match(value):
        raise ValueError("sha256 must be 64 lowercase hex characters")
    return value


class FeatureSpec(_Strict):
    """One raw input column.

    ``name`` is the user's column name, which clients send; ``input`` is the name of the
    ONNX graph input that carries it (a sanitised, unique identifier: user names may hold
    any character, and two of them can sanitise alike). ``categories`` lists the values
    seen in training; with ``other`` set, the column was capped at training time and every
    other value shares the ``__other__`` bucket. ``low`` and ``high`` are a numeric
    column's smallest and largest training values (the audit console sweeps between
    them); bundles written before they were recorded leave them out.
    """

    name: str = Field(min_length=1)
    input: str
    dtype: Literal["float", "string"]
    categories: list[str] | None = None
    other: bool = False
    low: float | None = None
    high: float | None = None

    @field_validator("input")
    @classmethod
    def _identifier(cls, v: str) -> str:
        if not _INPUT_NAME.match(v):
            raise ValueError(f"graph input name {v!r} must match {_INPUT_NAME.pattern}")
        return v

    @model_validator(mode="after")
    def _categories_match_dtype(self) -> FeatureSpec:
        if self.dtype == "string" and not self.categories:
            raise ValueError(f"categorical feature {self.name!r} needs its categories")
        if self.dtype == "float" and (self.categories is not None or self.other):
            raise ValueError(f"numeric feature {self.name!r} cannot have categories")
        if self.dtype == "string" and (self.low is not None or self.high is not None):
            raise ValueError(f"categorical feature {self.name!r} cannot have a numeric range")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"feature {self.name!r}: low must not exceed high")
        return self


class InputRule(_Strict):
    """How raw cell values are read, on both sides (see :mod:`app.bundle.normalise`)."""

    na_values: list[str]
    strip_whitespace: bool = True
    na_casefold: bool = False
    numbers_as_text: bool = True
    decimal: Literal[".", ","] = "."

    def normaliser(self) -> Normaliser:
        return Normaliser(
            frozenset(self.na_values),
            self.strip_whitespace,
            self.na_casefold,
            self.numbers_as_text,
            self.decimal,
        )


class TargetSpec(_Strict):
    """The target: class labels, or the affine map from standardised to original units."""

    name: str
    classes: list[str] | list[int] | None = None
    mean: float | None = None
    scale: Annotated[float, Field(gt=0)] | None = None
    # Range of the standardised training target; the regression prior integrates over it.
    low: float | None = None
    high: float | None = None


class SourceEntry(_Strict):
    """Where a pre-fitted expert came from: what the team named (a path as given, or
    ``models:/name/version``), how it was stored, and the sha256 of the file read (none
    for a Python object)."""

    uri: str
    format: str
    sha256: str | None = None

    _sha256 = field_validator("sha256")(lambda v: v if v is None else check_sha256(v))


class ExpertEntry(_Strict):
    name: str
    file: str
    sha256: str
    kind: Literal["sklearn", "xgboost", "lightgbm", "onnx"]
    inputs: list[str]
    output: str
    # Regression: the expert's predictive std in standardised units (OOF residual RMSE).
    sigma: Annotated[float, Field(gt=0)] | None = None
    # Regression experts trained here predict the standardised target; a user-supplied ONNX
    # file predicts original units and is standardised on the way in.
    output_units: Literal["standardised", "original"] | None = None
    # Regression: the graph output holding the expert's per-row predictive variance
    # (app.bundle.spread); the fused graph then outputs "expert_sds". None: sigma only.
    variance_output: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    # Trained elsewhere and used as is (never refit); older manifests leave both out.
    prefit: bool = False
    source: SourceEntry | None = None

    _name = field_validator("name")(lambda v: check_safe_name(v, "expert name"))

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An expert fitted here writes the same manifest as before these fields existed.
        data: dict[str, Any] = handler(self)
        if not self.prefit:
            data.pop("prefit", None)
        if self.source is None:
            data.pop("source", None)
        return data

    _sha256 = field_validator("sha256")(check_sha256)


class PriorSpec(_Strict):
    """What serving needs to report the adaptive prior at a new input (docs/method.md, "The
    adaptive prior")."""

    baseline: list[float]
    temperature: Annotated[float, Field(gt=0)]
    reduction: Literal["mean", "sum"]
    energy_scale: Literal["unit", "sigma"] = "unit"


class WeightHistogram(_Strict):
    """How the gate's weights fell on its training rows: per expert, its rows in each bin
    of ``edges`` (``[e_k, e_{k+1})``, the last bin closed). The server compares the weights
    it serves with it (:mod:`app.bundle.weight_bins`)."""

    edges: list[float]
    counts: dict[str, list[int]]
    rows: int = Field(ge=1)

    @model_validator(mode="after")
    def _bins(self) -> WeightHistogram:
        e = self.edges
        if len(e) < 2 or e[0] != 0.0 or e[-1] != 1.0 or any(a >= b for a, b in pairwise(e)):
            raise ValueError("edges must rise from 0 to 1")
        for name, counts in self.counts.items():
            if len(counts) != len(e) - 1 or min(counts) < 0 or sum(counts) != self.rows:
                raise ValueError(f"{name}: one count per bin, adding up to rows, is needed")
        return self


class GateEntry(_Strict):
    file: str
    sha256: str
    combiner: str
    inputs: list[str]
    output: str = "weights"
    params: dict[str, Any] = Field(default_factory=dict)
    prior: PriorSpec | None = None
    weight_histogram: WeightHistogram | None = None

    _sha256 = field_validator("sha256")(check_sha256)


class EnsembleEntry(_Strict):
    """The served graph: experts, gate and mixture fused (see training/export/ensemble.py)."""

    file: str
    sha256: str
    outputs: list[str]

    _sha256 = field_validator("sha256")(check_sha256)


class MixtureSpec(_Strict):
    # Post-hoc temperature on the mixture (1.0 = none); see app.bundle.mixture.
    temperature: Annotated[float, Field(gt=0)] = 1.0


class Manifest(_Strict):
    schema_version: Literal[3, 4] = SCHEMA_VERSION
    name: str
    version: str
    task: Task
    features: list[FeatureSpec]
    target: TargetSpec
    experts: list[ExpertEntry]
    gate: GateEntry
    ensemble: EnsembleEntry
    mixture: MixtureSpec = MixtureSpec()
    missing_token: str = MISSING_TOKEN
    input_rule: InputRule
    training: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = Field(default_factory=dict)
    data_fingerprint: str
    # The training inputs' bins, for input drift; older bundles serve without it.
    input_reference: InputReference | None = None
    # The held-out rows' realised NLL, for realised-performance alerts (or None).
    performance_reference: PerformanceReference | None = None
    library_versions: dict[str, str] = Field(default_factory=dict)
    created_at: datetime

    _name = field_validator("name")(lambda v: check_safe_name(v, "bundle name"))
    _version = field_validator("version")(lambda v: check_safe_name(v, "bundle version"))

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ValueError("feature names must be unique")
        inputs = [f.input for f in self.features]
        if len(set(inputs)) != len(inputs):
            raise ValueError("feature graph input names must be unique")
        experts = [e.name for e in self.experts]
        if len(experts) < 2 or len(set(experts)) != len(experts):
            raise ValueError("a bundle needs at least two experts with unique names")
        known = set(inputs)
        for owner, reads in [(e.name, e.inputs) for e in self.experts] + [
            ("gate", self.gate.inputs)
        ]:
            unknown = sorted(set(reads) - known)
            if unknown:
                raise ValueError(f"{owner} reads unknown features {unknown}")
        if self.task == "classification":
            if not self.target.classes or len(self.target.classes) < 2:
                raise ValueError("a classification bundle needs at least two classes")
        else:
            if self.target.mean is None or self.target.scale is None:
                raise ValueError("a regression bundle needs the target's mean and scale")
            if any(e.sigma is None or e.output_units is None for e in self.experts):
                raise ValueError("every regression expert needs sigma and output_units")
            if any(e.variance_output for e in self.experts) != (
                "expert_sds" in self.ensemble.outputs
            ):
                raise ValueError("expert_sds is an ensemble output iff an expert has variance")
        if self.gate.prior is not None and len(self.gate.prior.baseline) != len(experts):
            raise ValueError("the prior baseline needs one value per expert")
        histogram = self.gate.weight_histogram
        if histogram is not None and sorted(histogram.counts) != sorted(experts):
            raise ValueError("the gate's weight histogram needs one count list per expert")
        held = self.performance_reference
        if held is not None and sorted(held.nll) != sorted([*experts, MIXTURE_KEY]):
            raise ValueError("the performance reference needs every expert and the mixture")
        files = [e.file for e in self.experts] + [self.gate.file, self.ensemble.file]
        if len(set(files)) != len(files):
            raise ValueError("bundle files must be distinct")
        for f in files:
            if f.startswith("/") or ".." in f.split("/"):
                raise ValueError(f"bundle file {f!r} must be a relative path inside the bundle")
        return self

    @property
    def expert_names(self) -> list[str]:
        return [e.name for e in self.experts]

    def feature(self, name: str) -> FeatureSpec:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(name)
