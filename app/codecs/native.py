"""``POST /predict``: the body to an inference request, the answer back to JSON bytes.

The body's fields, options and defaults are the contract's
(:class:`app.contract.request.PredictRequest`); each fault names its field. Answers are
built from the prediction's arrays without a Python loop over cells (:mod:`.rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from app.bundle.digits import float32_values, significant, written
from app.bundle.mixture import INTERVAL
from app.codecs.rows import RowTemplate, row_template
from app.contract.answers import UNCERTAINTY
from app.contract.request import BODY_KEYS, DEFAULTS, FORMATS, PARTS
from app.core.inputs import json_type
from app.core.plane import InferenceRequest, InferenceResult
from app.core.runtime import LoadedModel
from app.errors import Fault, InvalidInput, TooManyRows

NUMPY = orjson.OPT_SERIALIZE_NUMPY


@dataclass(frozen=True)
class Options:
    format: str = "rows"
    include: tuple[str, ...] = PARTS


_DEFAULT_OPTIONS = Options()  # the contract's defaults (a test checks they agree)


def instance_field(i: int, name: str) -> str:
    return f"instances[{i}].{name}"


def _bad(field: str, code: str, message: str) -> InvalidInput:
    return InvalidInput([Fault(code, field, message)])


def options(body: dict[str, Any]) -> Options:
    if "format" not in body and "include" not in body:
        return _DEFAULT_OPTIONS  # most requests: nothing to check
    fmt = body.get("format", DEFAULTS["format"])
    if fmt not in FORMATS:
        raise _bad("format", "invalid_value", f"expected one of {', '.join(FORMATS)}, got "
                   f"{json_type(fmt)}")  # fmt: skip
    include = body.get("include", list(PARTS))
    if not isinstance(include, list) or not include:
        raise _bad(
            "include",
            "invalid_value",
            f"expected a non-empty list of distinct parts among {', '.join(PARTS)}, got "
            f"{json_type(include)}",
        )
    for i, part in enumerate(include):
        if not isinstance(part, str) or part not in PARTS:
            raise _bad(f"include[{i}]", "invalid_value",
                       f"expected one of {', '.join(PARTS)}, got {json_type(part)}")  # fmt: skip
        if part in include[:i]:
            raise _bad(f"include[{i}]", "invalid_value", f"{json_type(part)} is listed twice")
    return Options(fmt, tuple(p for p in PARTS if p in include))


def decode(body: Any, model: LoadedModel, max_rows: int) -> tuple[InferenceRequest, Options]:
    """``{"instances": [...], ...}`` to an inference request; faults name their field."""
    if not isinstance(body, dict):
        raise _bad("body", "wrong_type",
                   f'expected an object {{"instances": [...]}}, got {json_type(body)}')  # fmt: skip
    extra = [k for k in body if k not in BODY_KEYS]
    if extra:
        raise InvalidInput(
            [
                Fault("unknown_field", k, f"unknown field; the body takes {', '.join(BODY_KEYS)}")
                for k in extra
            ]
        )
    if "instances" not in body:
        raise _bad("instances", "missing_field", "missing; send an array of rows")
    rows = body["instances"]
    if not isinstance(rows, list):
        raise _bad(
            "instances", "wrong_type", f"expected an array of objects, got {json_type(rows)}"
        )
    if not rows:
        raise _bad("instances", "empty_batch", "empty batch; send at least one row")
    if len(rows) > max_rows:
        raise TooManyRows(
            f"{len(rows)} rows exceed the limit of {max_rows} (IABMA_MAX_BATCH_ROWS)",
            field="instances",
        )
    bad = [
        Fault("wrong_type", f"instances[{i}]", f"expected an object, got {json_type(r)}")
        for i, r in enumerate(rows)
        if not isinstance(r, dict)
    ]
    if bad:
        raise InvalidInput(bad[:20])
    opts = options(body)
    columns = model.features.columns(rows, instance_field)
    return InferenceRequest(columns, len(rows), rows, "predict", lambda i: f"instances[{i}]"), opts


def _header(model: LoadedModel, request_id: str) -> bytes:
    """``{"model":..,"version":..,"request_id":..,"task":..`` (open). The text around the
    id is made once per bundle; an id is letters, digits and ``._:/+=-``
    (app.contract.request.REQUEST_ID), which JSON writes as they are."""
    around = model.cache.get(_HEADER)
    if around is None:
        head = {"model": model.name, "version": model.version, "request_id": _ID}
        text = orjson.dumps({**head, "task": model.task})[:-1]
        around = model.cache[_HEADER] = tuple(text.split(_ID_TOKEN))
    return around[0] + request_id.encode() + around[1]


_HEADER = "native_header"
# Stands in for the request id in the cached header; no id, model name or version holds a NUL.
_ID = "\u0000"
_ID_TOKEN = orjson.dumps(_ID)[1:-1]


def encode(result: InferenceResult, opts: Options, request_id: str) -> bytes:
    if opts.format == "columnar":
        return encode_columnar(result, opts, request_id)
    model = result.model
    head = _header(model, request_id) + b',"predictions":['
    return render_rows(_template(model, opts.include), result, opts.include, head, b"]}")


def _template(model: LoadedModel, include: tuple[str, ...]) -> RowTemplate:
    """The bundle's row template for ``include``, made once."""
    key = ("rows", include)
    template = model.cache.get(key)
    if template is None:
        template = model.cache[key] = row_template(model, include)
    return template


class RowParts:
    """The rows answer of a large request made in parts, each as its rows' graph run ends
    (:meth:`app.core.service.Service.infer`); joined, it is :func:`encode`'s answer."""

    def __init__(self, opts: Options, request_id: str) -> None:
        self.include = opts.include
        self.request_id = request_id

    def part(self, result: InferenceResult) -> bytes:
        """A part's rows, comma-separated."""
        return render_rows(_template(result.model, self.include), result, self.include)

    def join(self, model: LoadedModel, parts: list[bytes]) -> bytes:
        pieces = [_header(model, self.request_id), b',"predictions":[']
        for i, part in enumerate(parts):
            pieces += [b",", part] if i else [part]
        pieces.append(b"]}")
        return b"".join(pieces)


def row_parts(opts: Options, request_id: str) -> RowParts | None:
    """The answer in parts, for the rows format; None for columnar, made whole."""
    return RowParts(opts, request_id) if opts.format == "rows" else None


def numeric_block(result: InferenceResult, include: tuple[str, ...]) -> np.ndarray:
    """Every number of every row, in the template's order, as one (n, K) array: float32
    for a classifier, regression's to nine significant digits (app.bundle.digits), in one
    call for the whole block."""
    p = result.prediction
    classifier = p.proba is not None
    parts: list[np.ndarray] = []
    if "prediction" in include:
        if p.proba is not None:
            parts.append(p.proba)
        else:
            assert p.mean is not None and p.std is not None and p.interval is not None
            parts.append(np.column_stack([p.mean, p.std, p.interval]))
    if "weights" in include:
        # The gate's float32 in any task: as float64, regression's weights are the values
        # of their float32's shortest text, which nine significant digits leave alone.
        parts.append(p.weights if classifier else np.asarray(float32_values(p.weights)))
    if "experts" in include:
        experts = p.expert_proba if p.expert_proba is not None else p.expert_means
        assert experts is not None
        if p.expert_sds is not None:  # per expert: its mean, then its own sd at the row
            experts = np.stack([experts, p.expert_sds], axis=2)
        parts.append(experts.reshape(p.n, -1))
    if "uncertainty" in include:
        parts.append(p.uncertainty)
    block = np.hstack(parts)
    if classifier:
        return np.ascontiguousarray(block, dtype=np.float32)
    return significant(block)


def render_rows(
    template: RowTemplate,
    result: InferenceResult,
    include: tuple[str, ...],
    head: bytes = b"",
    tail: bytes = b"",
) -> bytes:
    """``head``, the rows of the answer comma-separated, ``tail``."""
    p = result.prediction
    labels = None
    if p.proba is not None and ("prediction" in include or "experts" in include):
        labels = (p.label_index, p.expert_proba.argmax(axis=2) if p.expert_proba is not None
                  else None)  # fmt: skip
    return template.render(numeric_block(result, include), labels, head, tail)


def encode_columnar(result: InferenceResult, opts: Options, request_id: str) -> bytes:
    model, served = result.model, result.prediction
    p = written(served)
    out: dict[str, Any] = {}
    if "prediction" in opts.include:
        if p.proba is not None:
            out["label"] = model.label_values(served.label_index)
            out["probabilities"] = p.proba
        else:
            assert p.interval is not None
            out["mean"], out["std"] = p.mean, p.std
            out["interval"] = {
                "level": INTERVAL,
                "lower": np.ascontiguousarray(p.interval[:, 0]),
                "upper": np.ascontiguousarray(p.interval[:, 1]),
            }
    if "weights" in opts.include:
        out["weights"] = p.weights
    if "experts" in opts.include:
        if p.expert_proba is not None:
            assert served.expert_proba is not None
            out["experts"] = {
                "label": model.label_values(served.expert_proba.argmax(axis=2)),
                "probabilities": p.expert_proba,
            }
        else:
            std = significant(np.array(model.expert_std)) if p.expert_sds is None else p.expert_sds
            out["experts"] = {"mean": p.expert_means, "std": std}
    if "uncertainty" in opts.include:
        u = p.uncertainty
        out["uncertainty"] = {k: np.ascontiguousarray(u[:, j]) for j, k in enumerate(UNCERTAINTY)}
    meta: dict[str, Any] = {"format": "columnar", "experts": list(model.experts)}
    if p.proba is not None:
        meta["classes"] = list(model.classes)
    return (
        _header(model, request_id)
        + orjson.dumps(meta)[:-1].replace(b"{", b",", 1)
        + b',"predictions":'
        + orjson.dumps(out, option=NUMPY)
        + b"}"
    )
