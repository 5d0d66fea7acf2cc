"""The bundle being served, swapped atomically on reload, and the ready/draining state.

A request takes one reference to :class:`LoadedModel` and uses it to the end, so a reload
in the middle of a request never mixes two versions. Everything a request would otherwise
recompute from the manifest (feature checks, labels, the /models summary) is built here,
once per load.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from app.bundle.loader import open_bundle, resolve_version
from app.bundle.manifest import Manifest
from app.bundle.predictor import BundlePredictor
from app.core.inputs import FeatureTable
from app.errors import NotReady
from app.settings import Settings


@dataclass(frozen=True)
class LoadedModel:
    predictor: BundlePredictor
    manifest: Manifest
    features: FeatureTable
    experts: tuple[str, ...]
    classes: tuple[Any, ...]  # labels as in the manifest (int or str)
    class_keys: tuple[str, ...]  # the same labels as JSON object keys
    expert_std: tuple[float, ...]  # regression: each expert's own std, target units
    # What codecs and the service keep per bundle (answer templates, the graph's time per
    # row); never part of equality.
    cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def label_values(self, index: np.ndarray) -> Any:
        """Class labels at ``index``: an int64 array for integer labels, else a list."""
        if all(isinstance(c, int) for c in self.classes):
            return np.asarray(self.classes, dtype=np.int64)[index]
        return np.asarray(self.classes, dtype=object)[index].tolist()

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def task(self) -> str:
        return self.manifest.task

    @cached_property
    def labels(self) -> tuple[str, str]:
        """(name, version): the model labels of every metric, built once per load."""
        return (self.manifest.name, self.manifest.version)

    @classmethod
    def open(cls, settings: Settings) -> LoadedModel:
        """Resolve, verify and open the configured bundle; raises ``BundleError``."""
        path = resolve_version(settings.store, settings.model_name, settings.model_version)
        bundle = open_bundle(path, intra_op_threads=settings.ort_intra_op_threads)
        manifest = bundle.manifest
        classes = tuple(manifest.target.classes or ())
        scale = float(manifest.target.scale or 1.0)
        std = tuple(float(e.sigma) * scale for e in manifest.experts if e.sigma is not None)
        return cls(
            predictor=BundlePredictor(bundle),
            manifest=manifest,
            features=FeatureTable.from_manifest(
                manifest, settings.unknown_category, settings.ignore_training_columns
            ),
            experts=tuple(manifest.expert_names),
            classes=classes,
            class_keys=tuple(str(c) for c in classes),
            expert_std=std,
        )

    @cached_property
    def per_row_sds(self) -> bool:
        """Regression: the bundle serves each expert's own sd per row (``expert_sds``)."""
        return any(e.variance_output for e in self.manifest.experts)

    @cached_property
    def expert_spread(self) -> np.ndarray | None:
        """Regression: each expert's std (target units), then the mixture's temperature,
        as the audit record keeps them beside the experts' means."""
        if self.task != "regression":
            return None
        return np.array([*self.expert_std, self.manifest.mixture.temperature], dtype=np.float64)

    @cached_property
    def summary(self) -> dict[str, Any]:
        """The manifest as /models shows it: everything but the file layout."""
        m = self.manifest.model_dump(mode="json")
        for e in m["experts"]:
            e.pop("file", None)
        m["gate"].pop("file", None)
        m.pop("ensemble", None)
        return m


class ModelRuntime:
    """Holds the served model; ``reload`` swaps it only once the new one is verified."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.current: LoadedModel | None = None
        self.draining = False
        self._reload_lock = asyncio.Lock()

    @property
    def ready(self) -> bool:
        return self.current is not None and not self.draining

    def require(self) -> LoadedModel:
        model = self.current
        if model is None:
            raise NotReady("no bundle is loaded yet; retry shortly", field="model")
        return model

    async def load(self) -> LoadedModel:
        model = await asyncio.to_thread(LoadedModel.open, self.settings)
        self.current = model
        return model

    async def reload(self) -> tuple[LoadedModel | None, LoadedModel]:
        """Open the bundle again (LATEST or the pinned version) and swap it in.

        A bundle that fails verification raises ``BundleError`` and the old one stays.
        """
        async with self._reload_lock:
            previous = self.current
            model = await asyncio.to_thread(LoadedModel.open, self.settings)
            self.current = model
            return previous, model
