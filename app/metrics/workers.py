"""``process_*`` metrics for every live worker of this server, labelled by ``pid``.

prometheus_client's process collector reports the process that answers the scrape; with
several workers a scrape would then describe a different process each time. This one
reads ``/proc/<pid>`` of every worker that has written into the multiprocess directory
and is still alive, so one scrape shows the memory and CPU of all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from app.metrics.multiprocess import alive, pids_in


class WorkerProcessCollector:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def collect(self) -> Iterable[Any]:
        from prometheus_client.metrics_core import Metric
        from prometheus_client.process_collector import ProcessCollector
        from prometheus_client.samples import Sample

        merged: dict[str, Metric] = {}
        for pid in sorted(p for p in pids_in(self.directory) if alive(p)):
            # prometheus_client types pid as a zero-argument callable; the default binds
            # this iteration's pid.
            one = ProcessCollector(pid=lambda pid=pid: pid, registry=None)  # type: ignore[misc]
            for family in one.collect():
                out = merged.get(family.name)
                if out is None:
                    out = merged[family.name] = Metric(
                        family.name, family.documentation, family.type
                    )
                for s in family.samples:
                    out.samples.append(Sample(s.name, {**s.labels, "pid": str(pid)}, s.value))
        return list(merged.values())
