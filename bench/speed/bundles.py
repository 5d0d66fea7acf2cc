"""A bundle ready to benchmark: trained if missing, with its request bodies on disk."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.loadgen import bodies as B
from bench.loadgen.bodies import Feature
from bench.loadgen.h2load import grpc_frame
from bench.speed.plan import BIG

REPO = Path(__file__).resolve().parents[2]
N_SINGLE = 256  # distinct single-row bodies
N_BIG = 32  # distinct 1000-row bodies (each wrk thread holds them all in Lua)
FIT_ROWS = 20_000  # MLServer peer's estimator is fitted on this many rows
# The expert the single-model peers serve: a strong, typical one per bundle.
PEER_EXPERT = {"demo": "poly3", "california": "hgb"}


@dataclass
class BundleCtx:
    name: str
    store: Path
    version_dir: Path
    manifest: dict[str, Any]
    features: list[Feature]
    bodies: dict[tuple[str, int], Path] = field(default_factory=dict)  # (format, rows) -> file
    fit_X: np.ndarray | None = None  # MLServer peer's training data, numeric features only
    fit_y: np.ndarray | None = None

    @property
    def peer_expert(self) -> str:
        names = [e["name"] for e in self.manifest["experts"]]
        wanted = PEER_EXPERT.get(self.name, "hgb")
        return wanted if wanted in names else names[0]


def ensure_bundle(store: Path, name: str) -> Path:
    """The version directory LATEST points at; trains the bundle first if it is missing."""
    latest = store / name / "LATEST"
    if not latest.is_file():
        if name not in B.DATASETS:
            raise SystemExit(f"no bundle {name!r} in {store}, and no dataset to train it from")
        print(f"training {name!r} into {store} ...", flush=True)
        iabma = Path(sys.executable).parent / "iabma"
        cmd = [str(iabma), "train", "--dataset", B.DATASETS[name], "--store", str(store)]
        subprocess.run([*cmd, "--name", name, "--quiet"], cwd=REPO, check=True)
    return store / name / latest.read_text().strip()


def prepare_bundle(store: Path, name: str, workdir: Path) -> tuple[BundleCtx, list[dict]]:
    """Bundle context with its body files; also returns the JSON rows for the floor."""
    version_dir = ensure_bundle(store, name)
    manifest = json.loads((version_dir / "manifest.json").read_text(encoding="utf-8"))
    feats = B.features_of(manifest)
    frame, y = B.dataset_frame(name, N_BIG * BIG)
    rows = B.json_rows(frame, feats)
    ctx = BundleCtx(name, store, version_dir, manifest, feats)
    d = workdir / name
    d.mkdir(parents=True, exist_ok=True)
    output = "predict_proba" if manifest["task"] == "classification" else "predict"
    numeric = all(f.numeric for f in feats)
    for size, batches in ((1, B.chunks(rows, 1, N_SINGLE)), (BIG, B.chunks(rows, BIG, N_BIG))):
        ctx.bodies["native", size] = B.write_lines(
            d / f"native-{size}.txt", [B.native_body(x) for x in batches]
        )
        ctx.bodies["native_prediction", size] = B.write_lines(
            d / f"native_prediction-{size}.txt",
            [B.native_body(x, include=["prediction"]) for x in batches],
        )
        ctx.bodies["columnar", size] = B.write_lines(
            d / f"columnar-{size}.txt", [B.native_body(x, columnar=True) for x in batches]
        )
        ctx.bodies["oip", size] = B.write_lines(
            d / f"oip-{size}.txt", [B.oip_body(x, feats) for x in batches]
        )
        frames = b"".join(B.binary_oip_body(x, feats) for x in batches)
        ctx.bodies["binary", size] = d / f"binary-{size}.bin"
        ctx.bodies["binary", size].write_bytes(frames)
        # h2load sends one body over and over: the first batch.
        ctx.bodies["grpc", size] = d / f"grpc-{size}.bin"
        ctx.bodies["grpc", size].write_bytes(grpc_frame(B.grpc_message(batches[0], feats, name)))
        if numeric:
            ctx.bodies["matrix", size] = B.write_lines(
                d / f"matrix-{size}.txt", [B.matrix_body(x, feats, output) for x in batches]
            )
    if numeric:
        n_fit = min(FIT_ROWS, len(frame))
        ctx.fit_X = B.numeric_matrix(frame.iloc[:n_fit], feats)
        ctx.fit_y = y.iloc[:n_fit].to_numpy()
    return ctx, rows
