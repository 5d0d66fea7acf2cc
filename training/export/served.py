"""A written bundle checked as the server will load it, before ``LATEST`` moves.

The server refuses a bundle whose graph fails on a row of missing values; a team's
Pipeline (a OneHotEncoder with ``handle_unknown="error"``) can fail there, or on a
category it never saw (which the server hands the graphs as the missing token, or as the
``__other__`` bucket). So the version is opened with the app's own loader and run on
those rows and on ``X_check``; a failure names the expert and the feature.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from app.bundle.columns import Columns
from app.bundle.loader import BundleError, missing_row, open_bundle
from app.bundle.manifest import Manifest
from app.bundle.normalise import OTHER_CATEGORY
from training.errors import ParameterError


def unseen_row(manifest: Manifest, base: Columns) -> Columns:
    """``base``'s first row, with every category replaced by what an unseen one becomes."""
    row = {k: v[:1].copy() for k, v in base.items()}
    for f in manifest.features:
        if f.dtype == "string":
            token = OTHER_CATEGORY if f.other else manifest.missing_token
            row[f.input] = np.asarray([[token]], dtype=object)
    return row


def check_served(path: Path, columns: Columns) -> None:
    """Open the bundle at ``path`` with the app's loader and run the rows a server meets.

    ``columns`` are the check rows as the graphs take them. Raises ParameterError naming
    the failing expert and feature.
    """
    try:
        bundle = open_bundle(path)
    except BundleError as exc:
        manifest = _manifest_or_raise(path, exc)
        missing: Columns = {k: np.asarray(v) for k, v in missing_row(manifest).items()}
        _blame(path, manifest, missing, columns, "a row of missing values")
        raise ParameterError("bundle", path.name, f"cannot be served: {exc}") from None
    m = bundle.manifest
    cases = [
        ("a row with unseen categories", unseen_row(m, columns)),
        ("the check rows", columns),
    ]
    for label, feed in cases:
        try:
            bundle.session.run(m.ensemble.outputs, feed)
        except Exception as exc:  # onnxruntime's errors are untyped
            _blame(path, m, feed, columns, label)
            raise ParameterError("bundle", path.name, f"fails on {label}: {exc}") from None


def _manifest_or_raise(path: Path, exc: BundleError) -> Manifest:
    from app.bundle.loader import read_manifest

    try:
        return read_manifest(path)
    except BundleError:
        raise ParameterError("bundle", path.name, f"cannot be served: {exc}") from None


def _fails(session: ort.InferenceSession, feed: Columns) -> Exception | None:
    try:
        session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})
    except Exception as exc:  # onnxruntime's errors are untyped
        return exc
    return None


def _blame(path: Path, m: Manifest, feed: Columns, base: Columns, label: str) -> None:
    """Raise naming the first expert whose graph fails on ``feed`` and, where one column
    alone makes it fail, that feature."""
    good = {k: v[:1] for k, v in base.items()}
    bad = {k: v[:1] for k, v in feed.items()}
    for e in m.experts:
        session = ort.InferenceSession(str(path / e.file), providers=["CPUExecutionProvider"])
        exc = _fails(session, bad)
        if exc is None:
            continue
        culprit = next(
            (
                f.name
                for f in m.features
                if f.input in e.inputs and _fails(session, {**good, f.input: bad[f.input]})
            ),
            None,
        )
        where = f" (feature {culprit!r})" if culprit is not None else ""
        raise ParameterError(
            "experts",
            e.name,
            f"fails as served on {label}{where}: {exc}. Nothing was published; make the "
            "model accept missing values and unseen categories (e.g. a OneHotEncoder with "
            "handle_unknown='ignore')",
        ) from None
