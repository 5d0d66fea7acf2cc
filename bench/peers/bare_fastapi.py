"""The baseline a team writes by hand: FastAPI + onnxruntime serving ONE expert of a bundle.

No gate, no mixture, no audit trail, no metrics: a pydantic model built from the manifest's
features validates ``{"instances": [...]}``, each feature becomes one ``(n, 1)`` column, one
``InferenceSession.run`` answers, and FastAPI serialises the per-row result. This is what
our server is compared against, so it stays simple and idiomatic, without tricks.

    BARE_BUNDLE_DIR=models_store/california/<version> BARE_EXPERT=hgb \\
        uvicorn bench.peers.bare_fastapi:create_app --factory --port 8001

``BARE_EXPERT`` defaults to the bundle's first expert.
"""

# No `from __future__ import annotations` here: FastAPI must see the request model built
# inside create_app() as a class, not as a string it cannot resolve from module globals.
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, create_model


def instance_model(features: list[dict[str, Any]]) -> type[BaseModel]:
    """One optional field per feature; aliases keep feature names that are not identifiers."""
    fields: dict[str, Any] = {}
    for i, f in enumerate(features):
        kind = float if f["dtype"] == "float" else str
        fields[f"f{i}"] = (kind | None, Field(alias=f["name"]))
    return create_model("Instance", __config__=ConfigDict(extra="forbid"), **fields)


def create_app() -> FastAPI:
    bundle = Path(os.environ["BARE_BUNDLE_DIR"])
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    wanted = os.environ.get("BARE_EXPERT") or manifest["experts"][0]["name"]
    expert = next(e for e in manifest["experts"] if e["name"] == wanted)
    features = manifest["features"]
    # Clients send the user's column names; the graph's inputs carry the manifest's
    # graph names ("input").
    user_name = {f["input"]: f["name"] for f in features}
    numeric = {f["input"] for f in features if f["dtype"] == "float"}
    missing = manifest.get("missing_token", "__missing__")
    classification = manifest["task"] == "classification"

    # One intra-op thread, as our server uses: on 2 cores, the load generator needs the other.
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        str(bundle / expert["file"]), options, providers=["CPUExecutionProvider"]
    )
    output = expert["output"]

    Instance = instance_model(features)
    Request = create_model("PredictRequest", instances=(list[Instance], Field(min_length=1)))

    app = FastAPI(title=f"bare {manifest['name']}/{wanted}")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/predict")
    async def predict(body: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        rows = [row.model_dump(by_alias=True) for row in body.instances]
        feed = {}
        for name in expert["inputs"]:
            key = user_name[name]
            if name in numeric:
                col = [np.nan if r[key] is None else r[key] for r in rows]
                feed[name] = np.asarray(col, dtype=np.float32).reshape(-1, 1)
            else:
                col = [missing if r[key] is None else r[key] for r in rows]
                feed[name] = np.asarray(col, dtype=object).reshape(-1, 1)
        (out,) = session.run([output], feed)
        if classification:
            return {"predictions": [{"probabilities": p} for p in out.tolist()]}
        return {"predictions": [{"mean": m} for m in np.ravel(out).tolist()]}

    return app
