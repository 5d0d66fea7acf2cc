"""The experts a refit serves: the bundle's, less those retired, plus those added.

``--add-expert NAME=SOURCE`` brings an already trained model as an ONNX graph that reads
the bundle's features (one ``(n, 1)`` input per column, named as the column or as its graph
input); it is never refitted. Its outputs on the outcome rows are computed here, on the
same feature columns the served graph reads, and for regression its spread (``sigma``) is
estimated on the rows the gate is fitted on only. ``--retire-expert NAME`` leaves an expert
out. Every check is made before a row is read, and names the option and its value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import version_converter

from app.bundle.columns import Columns
from app.bundle.manifest import Manifest, check_safe_name
from app.bundle.mixture import clip_proba
from training.errors import ParameterError
from training.experts.onnx import rename_inputs
from training.experts.spec import Source
from training.onnx_graph import OPSET

# What a bundle's manifest accepts (app.bundle.manifest.Manifest): a gate over one expert
# would have nothing to weigh.
MIN_EXPERTS = 2
# Rows per run of the added graph, as for the served one (training.refit.gate.CHUNK_ROWS).
CHUNK_ROWS = 8192
# How far a float32 graph's probabilities may stray from [0, 1] and a sum of 1.
PROBA_SLACK = 1e-3
# onnxruntime's element types that a float32 feature column is cast to before a graph reads
# it (the fused graph casts the same way: training.export.ensemble.add_expert).
_NUMERIC = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


@dataclass(frozen=True)
class AddedExpert:
    """A model joining the bundle: its graph with inputs renamed to the bundle's graph
    input names, the output it predicts with, and where it came from."""

    name: str
    model: onnx.ModelProto
    output: str
    source: Source
    # A converted model's parity check on the refit's columns (None: an ONNX file as is).
    check: Callable[[Columns], None] | None = None

    @property
    def inputs(self) -> list[str]:
        return [i.name for i in self.model.graph.input]

    def run(self, columns: Columns, task: str, n_classes: int) -> np.ndarray:
        """Its outputs on the served feature columns, ``CHUNK_ROWS`` at a time:
        probabilities ``(n, C)``, clipped as the fused graph clips them, or means ``(n,)``
        in the target's units. Refuses outputs of another shape, non-finite ones, and
        "probabilities" that are not."""
        session = ort.InferenceSession(
            self.model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        n = next(iter(columns.values())).shape[0]
        parts = []
        for start in range(0, max(n, 1), CHUNK_ROWS):
            feeds = {}
            for i in session.get_inputs():
                col = columns[i.name][start : start + CHUNK_ROWS]
                cast = _NUMERIC.get(i.type)
                feeds[i.name] = col if cast is None else col.astype(cast)
            try:
                (out,) = session.run([self.output], feeds)
            except Exception as exc:  # onnxruntime raises its own untyped errors
                raise self.fault(f"fails on the outcome rows: {str(exc).splitlines()[0]}") from None
            rows, got = min(CHUNK_ROWS, n - start), np.asarray(out, dtype=np.float64)
            if got.ndim == 0 or got.shape[0] != rows:
                raise self.fault(f"outputs shape {got.shape} for {rows} rows")
            parts.append(got.reshape(rows, -1))
        arr = np.concatenate(parts)
        bad = np.flatnonzero(~np.isfinite(arr).all(axis=1))
        if bad.size:
            raise self.fault(
                f"gives non-finite outputs on {bad.size} of {n} outcome rows (the first: "
                f"row {bad[0]} of the window, oldest first)"
            )
        if task == "regression":
            if arr.shape[1] != 1:
                raise self.fault(f"outputs {arr.shape[1]} values per row, expected one number")
            return arr.reshape(-1)
        if arr.shape[1] != n_classes:
            raise self.fault(
                f"outputs {arr.shape[1]} values per row, expected {n_classes} probabilities "
                "in the bundle's class order"
            )
        if arr.min() < -PROBA_SLACK or np.abs(arr.sum(axis=1) - 1).max() > PROBA_SLACK:
            raise self.fault(
                "outputs values that are not probabilities (each row in [0, 1], summing to "
                "1): export the classifier's probabilities, not its scores"
            )
        return clip_proba(arr)

    def fault(self, problem: str) -> ParameterError:
        return ParameterError("--add-expert", f"{self.name}={self.source.uri}", problem)


def parse_added(text: str) -> tuple[str, str]:
    """``NAME=SOURCE`` as (name, source)."""
    name, sep, source = text.partition("=")
    if not sep or not name.strip() or not source.strip():
        raise ParameterError("--add-expert", text, "must be NAME=SOURCE, e.g. gbm=models/gbm.onnx")
    try:
        check_safe_name(name.strip(), "expert name")
    except ValueError as exc:
        raise ParameterError("--add-expert", text, str(exc)) from None
    return name.strip(), source.strip()


def check_changes(manifest: Manifest, added: Sequence[str], retired: Sequence[str]) -> None:
    """Refuse retiring an expert the bundle lacks, adding one it has (or twice), and a set
    of fewer than two experts."""
    names = manifest.expert_names
    listed = f"{manifest.version}'s experts are {', '.join(names)}"
    for k, name in enumerate(retired):
        if name not in names:
            raise ParameterError(
                "--retire-expert", name, f"is not an expert of the bundle: {listed}"
            )
        if name in retired[:k]:
            raise ParameterError("--retire-expert", name, "is given twice")
    seen: set[str] = set()
    for name in added:
        if name in names:
            raise ParameterError(
                "--add-expert", name, f"is already an expert of the bundle ({listed}); give "
                "the new one another name, or retire this one in a refit of its own"
            )  # fmt: skip
        if name in seen:
            raise ParameterError("--add-expert", name, "is given twice")
        seen.add(name)
    left = len(set(names) - set(retired)) + len(added)
    if left < MIN_EXPERTS:
        raise ParameterError(
            "--retire-expert", ",".join(retired),
            f"would leave {left} expert{'s' * (left != 1)}; a bundle needs at least "
            f"{MIN_EXPERTS} ({listed})",
        )  # fmt: skip


def load_added(text: str, manifest: Manifest, trust_pickle: bool = False) -> AddedExpert:
    """The expert ``--add-expert NAME=SOURCE`` names, its inputs mapped to the bundle's: an
    ONNX file with one input per column as it is, any other source converted
    (:mod:`training.refit.converted`)."""
    name, uri = parse_added(text)
    if not _per_column_onnx(uri, manifest):
        from training.refit.converted import converted_expert

        made = converted_expert(name, uri, text, manifest, trust_pickle)
        return AddedExpert(name, _at_opset(made.model, text), made.output, made.source, made.check)
    model, source = load_graph(name, uri)
    by_name = {f.name: f.input for f in manifest.features}
    dtypes = {f.input: f.dtype for f in manifest.features}
    renames: dict[str, str] = {}
    unknown = []
    for inp in model.graph.input:
        graph = by_name.get(inp.name) or (inp.name if inp.name in dtypes else None)
        if graph is None:
            unknown.append(inp.name)
            continue
        renames[inp.name] = graph
        text_input = inp.type.tensor_type.elem_type == onnx.TensorProto.STRING
        if text_input != (dtypes[graph] == "string"):
            raise ParameterError(
                "--add-expert", text, f"reads {inp.name!r} as "
                f"{'text' if text_input else 'numbers'}, and the bundle's column is "
                f"{'categorical' if dtypes[graph] == 'string' else 'numeric'}",
            )  # fmt: skip
    if unknown or not renames:
        raise ParameterError(
            "--add-expert", text,
            f"reads inputs {unknown} that are not features of the bundle "
            f"({', '.join(by_name)}): give it one (n, 1) input per column it reads, named as "
            "the column",
        )  # fmt: skip
    # skl2onnx classifiers put (label, probabilities); regressors a single output.
    chosen = model.graph.output[0 if manifest.task == "regression" else -1]
    output = chosen.name
    if not chosen.type.HasField("tensor_type"):
        raise ParameterError(
            "--add-expert", text, f"its output {output!r} is not a tensor (a ZipMap?): export "
            "the classifier's probabilities as a tensor (skl2onnx: zipmap=False)"
        )  # fmt: skip
    return AddedExpert(name, rename_inputs(_at_opset(model, text), renames), output, source)


def _per_column_onnx(uri: str, manifest: Manifest) -> bool:
    """Whether ``uri`` is an ONNX file whose every input is a column of the bundle."""
    path = Path(uri)
    if path.suffix != ".onnx" or not path.is_file():
        return path.suffix == ".onnx"  # a missing .onnx file is refused by load_graph
    known = {f.name for f in manifest.features} | {f.input for f in manifest.features}
    try:
        inputs = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]
    except Exception:  # onnx raises its own untyped errors; load_graph names them
        return True
    return bool(inputs) and all(i in known for i in inputs)


def _at_opset(model: onnx.ModelProto, text: str) -> onnx.ModelProto:
    """``model`` at the fused graph's opset, as the ensemble will hold it: refused now,
    before any row is read, when it cannot be brought there."""
    default = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), OPSET)
    if default == OPSET:
        return model
    try:
        return version_converter.convert_version(model, OPSET)
    except Exception as exc:  # the converter raises many types
        raise ParameterError(
            "--add-expert", text, f"its graph (opset {default}) cannot be brought to opset "
            f"{OPSET}, the served graph's: {str(exc).splitlines()[0]}; export it at opset "
            f"{OPSET} (skl2onnx: target_opset={{'': {OPSET}, 'ai.onnx.ml': 3}})"
        ) from None  # fmt: skip


def load_graph(name: str, uri: str, base: Path | None = None) -> tuple[onnx.ModelProto, Source]:
    """The ONNX graph of the model at ``uri``, and its :class:`Source`.

    The one place a source is read. For the integrator: formats other than ONNX (skops,
    XGBoost, LightGBM, joblib behind ``--trust-pickle``, ``models:/...``) join here by
    calling ``training.experts.sources.load_source(uri, base=base, trust_pickle=...,
    task=manifest.task)``: a Path is read below as it is; a fitted object goes through the
    pre-fitted experts' conversion (features in the bundle's column names, parity
    checked) and its graph is returned with the same :class:`Source`. Every failure names
    ``--add-expert`` and ``NAME=SOURCE``.
    """
    path = Path(uri) if base is None or Path(uri).is_absolute() else base / uri
    shown = f"{name}={uri}"
    if path.suffix != ".onnx":
        raise ParameterError("--add-expert", shown, "must name an .onnx file")
    if not path.is_file():
        raise ParameterError("--add-expert", shown, "is not an existing file")
    try:
        data = path.read_bytes()
        model = onnx.load_from_string(data)
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx raises its own untyped errors
        raise ParameterError("--add-expert", shown, f"cannot be loaded: {exc}") from None
    return model, Source(uri, "onnx", hashlib.sha256(data).hexdigest())


def expert_set(
    manifest: Manifest,
    served: np.ndarray,
    columns: Columns,
    y_fit: np.ndarray,
    fit_rows: np.ndarray,
    add: Sequence[AddedExpert],
    retire: Sequence[str],
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The refitted gate's experts, their outputs on every row and their spreads: the
    served experts' outputs ``served`` but the retired ones, then the added ones run on
    ``columns``; an added regression expert's spread from the fitting rows (whose encoded
    outcomes are ``y_fit``) only. Spreads are NaN for classification."""
    m = manifest
    kept = [j for j, name in enumerate(m.expert_names) if name not in set(retire)]
    names = [m.expert_names[j] for j in kept] + [a.name for a in add]
    sigmas = [m.experts[j].sigma or np.nan for j in kept]
    parts = [served[:, kept]]
    for added in add:
        if added.check is not None:
            added.check(columns)
        out = added.run(columns, m.task, len(m.target.classes or []))
        if m.task == "regression":
            assert m.target.mean is not None and m.target.scale is not None
            out = (out - m.target.mean) / m.target.scale
            sigmas.append(regression_sigma(out[fit_rows], y_fit))
        else:
            sigmas.append(np.nan)
        parts.append(out[:, None])
    return names, np.concatenate(parts, axis=1), np.asarray(sigmas, dtype=np.float64)


def regression_sigma(means: np.ndarray, y_enc: np.ndarray) -> float:
    """The spread of a regression expert's residuals, in standardised units, as training
    estimates it (training.estimator.regressor): their root mean square, at least 1e-6."""
    return float(max(np.sqrt(np.mean((means - y_enc) ** 2)), 1e-6))
