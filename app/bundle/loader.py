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

from app.bundle.columns import numeric_column, string_column
from app.bundle.manifest import (
    LATEST_FILE,
    MANIFEST_FILE,
    READABLE_VERSIONS,
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
    if isinstance(found, int) and not isinstance(found, bool) and found not in READABLE_VERSIONS:
        older = found < SCHEMA_VERSION
        first, last = READABLE_VERSIONS[0], READABLE_VERSIONS[-1]
        raise BundleError(
            f"{file} has schema_version {found}; this server reads schema_version "
            f"{first} to {last}. "
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
    entries.append((manifest.ensemble.file, manifest.ensemble.sha256))
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
    """A verified bundle with its one served graph open.

    The per-expert and gate files are verified but not loaded: ``ensemble.onnx`` holds
    them all, and loading them twice would double the memory of a large bundle.
    """

    path: Path
    manifest: Manifest
    session: ort.InferenceSession


def session_options(intra_op_threads: int) -> ort.SessionOptions:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = intra_op_threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return opts


def open_bundle(path: Path, *, intra_op_threads: int = 1) -> OpenedBundle:
    """Validate, checksum and open the served graph of the bundle at ``path``."""
    path = Path(path)
    manifest = read_manifest(path)
    if manifest.version != path.name:
        # Responses and audit records name the manifest's version; the pointer names
        # directories. A copy under another name would make the two disagree.
        raise BundleError(
            f"{path / MANIFEST_FILE} says version {manifest.version!r}, "
            f"but the bundle lives in {path.name!r}"
        )
    verify_files(path, manifest)
    rel = manifest.ensemble.file
    try:
        sess = ort.InferenceSession(
            str(path / rel),
            sess_options=session_options(intra_op_threads),
            providers=["CPUExecutionProvider"],
        )
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise BundleError(f"onnxruntime cannot load {rel}: {exc}") from None
    inputs = sorted(i.name for i in sess.get_inputs())
    declared = sorted(f.input for f in manifest.features)
    if inputs != declared:
        raise BundleError(f"{rel} takes inputs {inputs}, the manifest's features are {declared}")
    missing = sorted(set(manifest.ensemble.outputs) - {o.name for o in sess.get_outputs()})
    if missing:
        raise BundleError(f"{rel} lacks the outputs {missing}")
    bundle = OpenedBundle(path=path, manifest=manifest, session=sess)
    check_shapes(bundle)
    return bundle


def missing_row(manifest: Manifest) -> dict[str, object]:
    """One row with every feature missing, as the graph takes it."""
    return {
        f.input: numeric_column([None])
        if f.dtype == "float"
        else string_column([None], manifest.missing_token)
        for f in manifest.features
    }


def check_shapes(bundle: OpenedBundle) -> None:
    """Run one all-missing row through the graph: the widths must match the manifest.

    This also warms the session up, so the first request does not pay for it.
    """
    m = bundle.manifest
    names = m.ensemble.outputs
    try:
        got = dict(zip(names, bundle.session.run(names, missing_row(m)), strict=True))
    except Exception as exc:  # onnxruntime's errors are untyped
        raise BundleError(f"{m.ensemble.file} fails on a row of missing values: {exc}") from None
    n_experts = len(m.experts)
    if got["weights"].shape != (1, n_experts):
        raise BundleError(
            f"{m.ensemble.file}: the gate outputs {got['weights'].shape[-1]} weights, the "
            f"manifest lists {n_experts} experts"
        )
    if m.task == "classification":
        width = len(m.target.classes or [])
        if got["expert_probabilities"].shape != (1, n_experts, width):
            raise BundleError(
                f"{m.ensemble.file}: experts output {got['expert_probabilities'].shape[1:]}, "
                f"expected ({n_experts}, {width}) probabilities"
            )
    elif got["expert_means"].shape != (1, n_experts):
        raise BundleError(
            f"{m.ensemble.file}: experts output {got['expert_means'].shape[1:]} means, "
            f"expected {n_experts}"
        )
