"""``GET /performance?compare=staged``: the ``staged`` block, and the gauges it refreshes.

The block pairs the served and the staged version on the same outcome rows
(:func:`app.audit.read.shadow_scores.compare`); with nothing staged it is ``null``. The
staged version is the one this worker shadows, else the one ``STAGED`` names.
"""

from __future__ import annotations

from typing import Any

from app.audit.read.shadow_scores import compare
from app.bundle.loader import BundleError, read_manifest
from app.bundle.manifest import Manifest
from app.bundle.staged import staged
from app.core.runtime import LoadedModel
from app.core.service import Service
from app.core.shadow import publish
from app.errors import Fault, InvalidInput

COMPARE = ("staged",)


def check_compare(text: str | None) -> str | None:
    if text is not None and text not in COMPARE:
        raise InvalidInput(
            [Fault("invalid_value", "compare", f"expected {', '.join(COMPARE)}, got {text!r}")]
        )
    return text


def staged_manifest(service: Service, model: LoadedModel) -> Manifest | None:
    gate = service.shadow.gate
    if gate is not None and gate.served_version == model.version:
        return gate.manifest
    root = service.settings.store / model.name
    version = staged(root)
    if version is None or version == model.version:
        return None
    try:
        return read_manifest(root / version)
    except BundleError:
        return None  # a staged version that does not open: the shadow reports why


async def staged_block(
    service: Service, model: LoadedModel, window: tuple[int | None, int | None]
) -> dict[str, Any] | None:
    """The comparison, or None with nothing staged; sets the shadow's gauges."""
    manifest = staged_manifest(service, model)
    if manifest is None:
        return None
    store = service.require_store()
    block: dict[str, Any] = await service.read_store(
        compare, store.engine, model.name, model.manifest, manifest, window
    )
    if window == (None, None):
        publish(block)
    block["shadow_stopped"] = service.shadow.stopped
    return block
