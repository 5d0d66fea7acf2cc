"""Request bodies built from real rows of the dataset a bundle was trained on.

Every server gets the same rows in its own wire format: our native ``{"instances": ...}``
(also the bare peer's), one OIP v2 tensor per feature (our ``/v2/.../infer``), or one
``[n, d]`` FP32 tensor (MLServer's scikit-learn runtime). Bodies are written one per line
for ``rotate.lua``; binary OIP bodies (the binary tensor data extension) as framed records
for ``frames.lua``, and a gRPC ``ModelInferRequest`` as one length-prefixed message for
h2load.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# bundle name -> `iabma train --dataset` value
DATASETS = {"demo": "simulation", "california": "california"}
SIMULATION_SEED = 12_345  # not the training seed: these are fresh draws from the same law


@dataclass(frozen=True)
class Feature:
    name: str
    numeric: bool


def features_of(manifest: dict[str, Any]) -> list[Feature]:
    return [Feature(f["name"], f["dtype"] == "float") for f in manifest["features"]]


def dataset_frame(bundle: str, n_rows: int) -> tuple[pd.DataFrame, pd.Series]:
    """At least ``n_rows`` real inputs (cycled if the CSV is shorter) and their targets."""
    from training.datasets import load_shared, simulate

    dataset = DATASETS.get(bundle, bundle)
    data = simulate(n_rows, SIMULATION_SEED) if dataset == "simulation" else load_shared(dataset)
    X, y = data.X, data.y
    if len(X) < n_rows:
        reps = math.ceil(n_rows / len(X))
        X = pd.concat([X] * reps, ignore_index=True)
        y = pd.concat([y] * reps, ignore_index=True)
    return X.iloc[:n_rows].reset_index(drop=True), y.iloc[:n_rows].reset_index(drop=True)


def json_rows(frame: pd.DataFrame, features: Sequence[Feature]) -> list[dict[str, Any]]:
    """Rows as a CSV reader hands them to a client: numbers, category strings, null."""
    rows = []
    for record in frame[[f.name for f in features]].to_dict(orient="records"):
        row: dict[str, Any] = {}
        for f in features:
            v = record[f.name]
            if v is None or (isinstance(v, float) and math.isnan(v)):
                row[f.name] = None
            elif f.numeric:
                row[f.name] = float(v)
            else:
                row[f.name] = str(v)
        rows.append(row)
    return rows


def native_body(
    rows: Sequence[dict[str, Any]], columnar: bool = False, include: Sequence[str] = ()
) -> str:
    """``/predict``'s body; ``columnar`` asks for one array per field in the answer,
    ``include`` for those parts alone."""
    body: dict[str, Any] = {"instances": list(rows)}
    if columnar:
        body["format"] = "columnar"
    if include:
        body["include"] = list(include)
    return json.dumps(body, separators=(",", ":"))


def oip_body(rows: Sequence[dict[str, Any]], features: Sequence[Feature]) -> str:
    inputs = [
        {
            "name": f.name,
            "datatype": "FP32" if f.numeric else "BYTES",
            "shape": [len(rows), 1],
            "data": [r[f.name] for r in rows],
        }
        for f in features
    ]
    return json.dumps({"inputs": inputs}, separators=(",", ":"))


def matrix_body(rows: Sequence[dict[str, Any]], features: Sequence[Feature], output: str) -> str:
    """MLServer's scikit-learn runtime takes the features as one row-major [n, d] tensor."""
    data = [r[f.name] for r in rows for f in features]
    shape = [len(rows), len(features)]
    body = {
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": shape, "data": data}],
        # The classifier's probabilities (not the runtime's default labels), like ours.
        "outputs": [{"name": output}],
    }
    return json.dumps(body, separators=(",", ":"))


def chunks(rows: Sequence[dict[str, Any]], size: int, count: int) -> list[list[dict[str, Any]]]:
    """``count`` distinct requests of ``size`` rows, wrapping around ``rows``."""
    out = []
    for i in range(count):
        start = (i * size) % len(rows)
        out.append([rows[(start + j) % len(rows)] for j in range(size)])
    return out


def write_lines(path: Path, bodies: Sequence[str]) -> Path:
    if any("\n" in b for b in bodies):
        raise ValueError("a request body must fit on one line for rotate.lua")
    path.write_text("\n".join(bodies) + "\n", encoding="utf-8")
    return path


def numeric_matrix(frame: pd.DataFrame, features: Sequence[Feature]) -> np.ndarray:
    return frame[[f.name for f in features]].to_numpy(dtype=np.float32)


def _raw(rows: Sequence[dict[str, Any]], f: Feature) -> tuple[str, bytes]:
    """One feature's column as raw tensor data: FP32 (NaN for null), or BYTES."""
    values = [r[f.name] for r in rows]
    if f.numeric:
        col = np.array([np.nan if v is None else v for v in values], dtype="<f4")
        return "FP32", col.tobytes()
    parts = [s.encode() for s in ("" if v is None else str(v) for v in values)]
    return "BYTES", b"".join(struct.pack("<I", len(p)) + p for p in parts)


def binary_oip_body(rows: Sequence[dict[str, Any]], features: Sequence[Feature]) -> bytes:
    """The binary tensor data extension as tritonclient sends it by default: binary inputs,
    binary outputs; framed as ``"<header length> <body length>\n"`` + body for frames.lua."""
    inputs, data = [], []
    for f in features:
        dtype, raw = _raw(rows, f)
        inputs.append(
            {"name": f.name, "datatype": dtype, "shape": [len(rows), 1],
             "parameters": {"binary_data_size": len(raw)}}
        )  # fmt: skip
        data.append(raw)
    body = {"inputs": inputs, "parameters": {"binary_data_output": True}}
    header = json.dumps(body, separators=(",", ":")).encode()
    whole = header + b"".join(data)
    return f"{len(header)} {len(whole)}\n".encode() + whole


def grpc_message(rows: Sequence[dict[str, Any]], features: Sequence[Feature], model: str) -> bytes:
    """A ``ModelInferRequest`` with raw_input_contents, built with tritonclient's messages."""
    from tritonclient.grpc import service_pb2

    msg = service_pb2.ModelInferRequest(model_name=model)
    for f in features:
        dtype, raw = _raw(rows, f)
        msg.inputs.add(name=f.name, datatype=dtype, shape=[len(rows), 1])
        msg.raw_input_contents.append(raw)
    return msg.SerializeToString()
