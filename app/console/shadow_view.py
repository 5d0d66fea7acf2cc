"""The Performance page's staged section: the served and the staged version's realised
NLL on the same outcome rows, over time (:mod:`app.core.shadow_report`)."""

from __future__ import annotations

from typing import Any

from app.console import charts
from app.core.runtime import LoadedModel
from app.core.service import Service
from app.core.shadow_report import staged_block


async def staged_section(
    service: Service, model: LoadedModel, window: tuple[int | None, int | None]
) -> dict[str, Any] | None:
    """The ``staged`` block and its chart; None with nothing staged."""
    block = await staged_block(service, model, window)
    if block is None:
        return None
    spans = block["over_time"]
    short = len(spans) < 2 or spans[-1]["start"][:10] == spans[0]["start"][:10]
    labels = [b["start"][11:16] if short else b["start"][5:16].replace("T", " ") for b in spans]
    pair = {
        f"served {block['served_version']}": [b["served_nll"] for b in spans],
        f"staged {block['version']}": [b["staged_nll"] for b in spans],
    }
    values = [v for s in pair.values() for v in s]
    x = [float(i) for i in range(len(spans))]
    return {"block": block, "chart": charts.line_chart(x, pair, labels, charts.y_range(values))}
