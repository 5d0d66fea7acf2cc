"""A served bundle whose predictions get outcomes back: the data a refit learns from.

Predictions go through the real app (``/predict``, committed to a real trail) and the
outcomes through ``/feedback``; each outcome is drawn from one expert's own served
probabilities, so that expert is the truth of the world the test builds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.bundles import make_settings
from tests.support.harness import AsgiHarness

Labeller = Callable[[dict[str, Any]], Any]


def drawn_from(expert: str, rng: np.random.Generator) -> Labeller:
    """An outcome drawn from ``expert``'s served probabilities for the row."""

    def label(item: dict[str, Any]) -> Any:
        probs = item["experts"][expert]["probabilities"]
        keys = list(probs)
        p = np.asarray([probs[k] for k in keys], dtype=np.float64)
        return int(keys[rng.choice(len(keys), p=p / p.sum())])

    return label


def serve_with_outcomes(
    store: Path,
    trail_dir: Path,
    rows: list[dict[str, Any]],
    label: Labeller,
    *,
    prefix: str = "r",
    per_request: int = 250,
    **settings: Any,
) -> dict[str, list[dict[str, Any]]]:
    """Serve ``rows`` in requests of ``per_request`` and post an outcome for each row;
    return each request's instances by request id, as sent."""
    sent: dict[str, list[dict[str, Any]]] = {}
    with AsgiHarness(make_settings(store, trail_dir, **settings)) as app:
        for k in range(0, len(rows), per_request):
            rid = f"{prefix}{k // per_request}"
            batch = rows[k : k + per_request]
            r = app.post("/predict", json={"instances": batch}, headers={"X-Request-ID": rid})
            assert r.status_code == 200, r.text
            outcomes = [
                {"request_id": rid, "row": i, "outcome": label(item)}
                for i, item in enumerate(r.json()["predictions"])
            ]
            r = app.post("/feedback", json={"outcomes": outcomes})
            assert r.status_code == 200, r.text
            sent[rid] = batch
    return sent
