"""What ``iabma refit`` prints as it goes, and the version it stages or publishes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def print_start(
    args: argparse.Namespace,
    version: tuple[Path, Any],
    read: tuple[int, Any, float],
    gate_name: str,
    overrides: dict[str, Any],
) -> None:
    """What is refitted (the version and its manifest), on which rows (how many, their
    data, the seconds they took to read), and with which settings."""
    from app.audit.store.records import iso_from_us

    source, manifest = version
    n_rows, data, read_s = read
    window = f"{iso_from_us(int(data.record_us[0]))} to {iso_from_us(int(data.record_us[-1]))}"
    print(
        f"refitting the gate of {args.name} {source.name} on {n_rows:,} outcome rows "
        f"served {window} by {', '.join(data.versions)} (read in {read_s:.1f} s)"
    )
    basis = (
        f"the settings {source.name} records"
        if args.combiner is None
        else f"its defaults ({source.name}'s gate is {manifest.gate.combiner})"
    )
    changed = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
    print(f"gate: {gate_name} with {basis}" + (f", but {changed}" if changed else ""))


def progress(total: int) -> Any:
    """A progress callback over the rows run through the experts."""
    from app.cli.progress import ProgressBar

    bar = ProgressBar(total, "rows through the experts")

    def progress(done: int, total: int) -> None:
        bar.update(done)
        if done == total:
            bar.close()  # before the gate's own progress bars

    return progress


def write(
    args: argparse.Namespace,
    refit: Any,
    data: Any,
    source: Path,
    gate: tuple[str, dict[str, Any]],
    excluded: dict[str, int],
    fit_s: float,
    promote: bool,
) -> Path:
    """Stage (or, with ``promote``, publish) the refitted version with its provenance."""
    from training.estimator.base import fingerprint
    from training.refit.export import write_refit
    from training.refit.held_out import expert_held_out_metrics, held_out_reference
    from training.refit.report import held_out_metrics, refit_record

    gate_name, overrides = gate
    provenance = refit_record(
        refit,
        data,
        source=source.name,
        since=args.since,
        until=args.until,
        inputs="csv" if args.csv is not None else "trail",
        excluded=excluded,
        combiner=gate_name,
        overrides={
            **({"combiner": args.combiner} if args.combiner is not None else {}),
            **overrides,
            **({"random_state": args.seed} if args.seed is not None else {}),
        },
        fit_seconds=fit_s,
    )
    return write_refit(
        refit,
        args.store,
        provenance=provenance,
        metrics=held_out_metrics(refit),
        data_fingerprint=fingerprint(data.X, data.y.astype(str)),
        publish=promote,
        expert_metrics=expert_held_out_metrics(refit),
        performance=held_out_reference(refit),
    )
