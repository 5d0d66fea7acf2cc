"""Find, verify and open a bundle: ``models_store/<name>/<version>/``.

Verification happens before any ONNX file is parsed: the manifest must validate against
:mod:`app.bundle.manifest` and every file's sha256 must match it. Anything else raises
:class:`BundleError` with a message that names the file and the fault.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort
from pydantic import ValidationError

from app.bundle.columns import feed, numeric_column, string_column
from app.bundle.manifest import (
    LATEST_FILE,
    MANIFEST_FILE,
    SCHEMA_VERSION,
    Manifest,
    check_safe_name,
)


class BundleError(Exception):
    """A bundle that cannot be served: missing, tampered with, or malformed."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def resolve_version(store: Path, name: str, version: str | None = None) -> Path:
    """The directory of ``name``'s pinned ``version``, or of the one ``LATEST`` names."""
    try:
        check_safe_name(name, "model name")
        if version is not None:
            check_safe_name(version, "model version")
    except ValueError as exc:
        raise BundleError(str(exc)) from None
    root = Path(store) / name
    if not root.is_dir():
        raise BundleError(f"no bundle named {name!r} under {store}")
    if version is None:
        latest = root / LATEST_FILE
        if not latest.is_file():
            raise BundleError(f"{latest} is missing: no version of {name!r} has been published")
        version = latest.read_text(encoding="utf-8").strip()
        try:
            check_safe_name(version, f"version in {latest}")
        except ValueError as exc:
            raise BundleError(str(exc)) from None
    path = root / version
    if not path.is_dir():
        raise BundleError(f"version {version!r} of {name!r} does not exist under {root}")
    return path


def read_manifest(path: Path) -> Manifest:
    file = Path(path) / MANIFEST_FILE
    if not file.is_file():
        raise BundleError(f"{file} is missing (an unfinished or foreign bundle)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{file} is not valid JSON: {exc}") from None
    found = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(found, int) and not isinstance(found, bool) and found != SCHEMA_VERSION:
        older = found < SCHEMA_VERSION
        raise BundleError(
            f"{file} has schema_version {found}; this server reads schema_version "
            f"{SCHEMA_VERSION}. "
            + (
                "Re-export the bundle with this release's `iabma train`."
                if older
                else "Upgrade the server to a release that reads it."
            )
        )
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'manifest'}: {e['msg']}" for e in exc.errors()
        )
        raise BundleError(f"{file} does not match the manifest schema: {problems}") from None


def verify_files(path: Path, manifest: Manifest) -> None:
    """Refuse the bundle if any file's sha256 differs from the manifest's."""
    entries = [(e.file, e.sha256) for e in manifest.experts]
    entries.append((manifest.gate.file, manifest.gate.sha256))
    root = Path(path).resolve()
    for rel, expected in entries:
        file = (root / rel).resolve()
        if root not in file.parents:
            raise BundleError(f"bundle file {rel!r} points outside the bundle")
        if not file.is_file():
            raise BundleError(f"bundle file {rel} is missing from {root}")
        actual = sha256_file(file)
        if actual != expected:
            raise BundleError(
                f"bundle file {rel} has sha256 {actual[:12]}..., the manifest says "
                f"{expected[:12]}...: refusing a modified bundle"
            )


@dataclass(frozen=True)
class OpenedBundle:
    path: Path
    manifest: Manifest
    experts: dict[str, ort.InferenceSession]
    gate: ort.InferenceSession


def session_options(intra_op_threads: int) -> ort.SessionOptions:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = intra_op_threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return opts


def open_bundle(path: Path, *, intra_op_threads: int = 1) -> OpenedBundle:
    """Validate, checksum and open every ONNX file of the bundle at ``path``."""
    path = Path(path)
    manifest = read_manifest(path)
    verify_files(path, manifest)
    opts = session_options(intra_op_threads)

    def session(rel: str, declared: list[str], output: str) -> ort.InferenceSession:
        try:
            sess = ort.InferenceSession(
                str(path / rel), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise BundleError(f"onnxruntime cannot load {rel}: {exc}") from None
        inputs = sorted(i.name for i in sess.get_inputs())
        if inputs != sorted(declared):
            raise BundleError(f"{rel} takes inputs {inputs}, the manifest says {sorted(declared)}")
        if output not in {o.name for o in sess.get_outputs()}:
            raise BundleError(f"{rel} has no output named {output!r}")
        return sess

    experts = {e.name: session(e.file, e.inputs, e.output) for e in manifest.experts}
    gate = session(manifest.gate.file, manifest.gate.inputs, manifest.gate.output)
    bundle = OpenedBundle(path=path, manifest=manifest, experts=experts, gate=gate)
    check_shapes(bundle)
    return bundle


def check_shapes(bundle: OpenedBundle) -> None:
    """Run one all-missing row through every graph: the widths must match the manifest.

    This also warms the sessions up, so the first request does not pay for it.
    """
    m = bundle.manifest
    row = {
        f.input: numeric_column([None])
        if f.dtype == "float"
        else string_column([None], m.missing_token)
        for f in m.features
    }
    try:
        (w,) = bundle.gate.run([m.gate.output], feed(row, m.gate.inputs))
    except Exception as exc:  # onnxruntime's errors are untyped
        raise BundleError(f"{m.gate.file} fails on a row of missing values: {exc}") from None
    if w.shape != (1, len(m.experts)):
        raise BundleError(
            f"{m.gate.file}: gate outputs {w.shape[-1]} weights, the manifest lists "
            f"{len(m.experts)} experts"
        )
    width = len(m.target.classes or []) if m.task == "classification" else 1
    for e in m.experts:
        try:
            (out,) = bundle.experts[e.name].run([e.output], feed(row, e.inputs))
        except Exception as exc:
            raise BundleError(f"{e.file} fails on a row of missing values: {exc}") from None
        if out.reshape(1, -1).shape[1] != width:
            raise BundleError(f"{e.file} outputs {out.shape}, expected {width} value(s) per row")
