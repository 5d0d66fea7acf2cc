"""``iabma refit``: refit a bundle's gate on the outcomes in the audit trail; stage it.

Reads the outcome rows (and their inputs) of the window, refits the gate (the bundle's own
combiner and settings unless ``--combiner``/``--kl-weight`` say otherwise) on all but the
latest requests, prints the served and the refitted gate side by side on those held-out
requests with the bootstrap SE of their paired difference, and writes a new version with
the same expert files. ``LATEST`` moves only with ``--promote-if-better`` and a gain beyond
one SE; ``--stage`` points ``STAGED`` at it instead, to be scored in shadow on live traffic.

``--add-expert NAME=SOURCE`` brings an already trained model (an ONNX file with one (n, 1)
input per column it reads, named as the column) and ``--retire-expert NAME`` leaves one
out: the gate is then refitted over the new set of experts, every other expert file kept
byte for byte. ``--exclude-poster`` leaves out the outcomes a poster sent.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from app.cli.text import command


def add_parser(sub: Any) -> None:
    p = command(sub, "refit", "refit the gate on outcomes from the audit trail; stage it", __doc__)
    p.add_argument("--store", type=Path, default=Path("models_store"))
    p.add_argument("--name", required=True, help="bundle name")
    p.add_argument(
        "--audit-url", default=None, help="the trail's SQLAlchemy URL (default IABMA_AUDIT_URL)"
    )
    p.add_argument("--version", default=None, help="the version to refit (default: LATEST)")
    p.add_argument(
        "--since",
        default=None,
        metavar="T",
        help="rows served at or after T (ISO), or 'auto': after the change of the realised "
        "NLL that GET /performance suggests",
    )
    p.add_argument("--until", default=None, metavar="T", help="rows served before T (ISO)")
    p.add_argument(
        "--holdout",
        type=float,
        default=0.2,
        help="share of rows held out to compare: the latest requests, whole (0.2)",
    )
    p.add_argument(
        "--combiner",
        default=None,
        help="fit this gate with its defaults (default: the bundle's own gate, with the "
        "settings it records)",
    )
    p.add_argument(
        "--kl-weight",
        default=None,
        help="lambda_KL of an iabma gate, or 'auto' (default: the bundle's recorded setting)",
    )
    p.add_argument(
        "--csv",
        type=Path,
        default=None,
        help="the requests' inputs, for a trail that kept only their hash: each request's "
        "rows as sent, in order",
    )
    p.add_argument("--id-column", default=None, help="the CSV column holding the request id")
    _add_expert_arguments(p)
    p.add_argument(
        "--exclude-poster",
        action="append",
        default=[],
        metavar="POSTER",
        help="leave out the outcomes this poster sent, named as GET /performance lists "
        "posters (key: and 12 hex digits, or anonymous; repeatable)",
    )
    p.add_argument(
        "--seed", type=int, default=None, help="seeds the gate (default: the bundle's gate's seed)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--no-publish", action="store_true", help="stage the new version (the default, said out)"
    )
    out.add_argument(
        "--promote-if-better",
        action="store_true",
        help="point LATEST at it if it beats the served gate by more than one SE",
    )
    out.add_argument(
        "--stage",
        action="store_true",
        help="point STAGED at it: the servers score it in shadow beside the served version "
        "(iabma promote --if-better-live promotes it on the outcomes that follow)",
    )
    p.set_defaults(run=run)


def _add_expert_arguments(p: argparse.ArgumentParser) -> None:
    """Experts that join or leave the refitted gate."""
    p.add_argument(
        "--add-expert",
        action="append",
        default=[],
        metavar="NAME=SOURCE",
        help="a trained model that joins the experts (repeatable): any source an "
        "experts.toml takes (.onnx, .skops, XGBoost .json/.ubj, LightGBM .txt, models:/...), "
        "converted and checked against its own predictions on the outcome rows",
    )
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="allow --add-expert to load pickles (joblib files, MLflow's pickled models)",
    )
    p.add_argument(
        "--retire-expert",
        action="append",
        default=[],
        metavar="NAME",
        help="an expert the refitted gate leaves out (repeatable)",
    )


def _time_us(option: str, text: str | None) -> int | None:
    from datetime import UTC, datetime

    from training.errors import ParameterError

    if text is None:
        return None
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise ParameterError(option, text, "must be an ISO-8601 time") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    delta = stamp - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _gate_options(args: argparse.Namespace, manifest: Any) -> tuple[str, dict[str, Any]]:
    """The refit's gate and the settings the command line overrides, checked before any
    row is read."""
    from training.combiners.registry import combiner_class
    from training.commands.train import _kl_weight
    from training.errors import ParameterError
    from training.refit.settings import gate_settings

    name = manifest.gate.combiner if args.combiner is None else args.combiner
    try:
        accepted = combiner_class(name)._get_param_names()
    except ParameterError as exc:
        raise ParameterError("--combiner", name, exc.problem) from None
    overrides: dict[str, Any] = {}
    if args.kl_weight is not None:
        if "kl_weight" not in accepted:
            raise ParameterError(
                "--kl-weight", args.kl_weight, f"applies to an iabma gate, and this one is {name!r}"
            )
        overrides["kl_weight"] = _kl_weight(args.kl_weight)
    gate_settings(manifest, args.combiner, overrides)  # refuses stale recorded settings now
    return name, overrides


def _engine_and_key(args: argparse.Namespace, need_key: bool) -> tuple[Any, bytes | None]:
    from app.audit.store.hashkey import audit_hash_key
    from app.audit.write.trail_db import AuditStore
    from app.errors import StartupRefused
    from app.settings import SettingsError, load_settings
    from training.errors import ParameterError

    try:
        settings = load_settings(**({"audit_url": args.audit_url} if args.audit_url else {}))
    except SettingsError as exc:
        raise ParameterError("--audit-url", args.audit_url or "IABMA_AUDIT_URL", str(exc)) from None
    key = None
    if need_key:
        try:
            key = audit_hash_key(settings)
        except StartupRefused as exc:
            raise ParameterError("--csv", str(args.csv), f"needs the trail's key: {exc}") from None
    return AuditStore(settings.audit_url, settings.audit_timeout_seconds), key


def _expert_changes(args: argparse.Namespace, manifest: Any) -> list[Any]:
    """The experts added (loaded, their inputs matched to the bundle's), after checking
    what is retired; before any row is read."""
    from training.refit.experts import check_changes, load_added, parse_added

    names = [parse_added(text)[0] for text in args.add_expert]
    check_changes(manifest, names, args.retire_expert)
    return [load_added(text, manifest, args.trust_pickle) for text in args.add_expert]


def _read(
    args: argparse.Namespace, since: int | None, until: int | None, posters: tuple[str, ...]
) -> tuple[list[Any], dict[int, Any], dict[str, int], bytes | None]:
    """The window's outcome rows less the posters', their records' inputs, the rows each
    poster had, and the trail's key when a CSV is to be checked."""
    from app.audit.read.labelled import excluded_rows, holds_outcomes, labelled_rows
    from training.errors import ParameterError

    store, key = _engine_and_key(args, args.csv is not None)
    try:
        if not holds_outcomes(store.engine):
            raise ParameterError(
                "--audit-url", args.audit_url or "IABMA_AUDIT_URL", "holds no outcomes"
            )
        rows, inputs = labelled_rows(store.engine, args.name, since, until, None, posters)
        excluded = excluded_rows(store.engine, args.name, since, until, posters)
    finally:
        store.close()
    return rows, inputs, excluded, key


def _inputs(args: argparse.Namespace, rows: list[Any], inputs: dict[int, Any], key: Any) -> Any:
    """The rows' inputs: from the trail, or from ``--csv`` checked against it."""
    from training.errors import ParameterError
    from training.refit.data import RefitRefused, from_csv, from_trail

    if args.csv is not None:
        assert key is not None
        return from_csv(rows, inputs, args.csv, args.id_column, key)
    try:
        return from_trail(rows, inputs)
    except RefitRefused as exc:
        if not args.add_expert:
            raise
        # The added expert must see each row's input: say which option needs them.
        raise ParameterError("--add-expert", args.add_expert[0], f"needs inputs: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from training.commands.refit_report import print_start, progress, write
    from training.refit.data import check_posters, check_rows
    from training.refit.gate import GateRefit, check_holdout
    from training.refit.report import comparison_lines, expert_lines

    source, manifest = _opened(args)
    until = _time_us("--until", args.until)
    since = _auto_since(args, until) if args.since == "auto" else _time_us("--since", args.since)
    check_holdout(args.holdout)
    gate_name, overrides = _gate_options(args, manifest)
    added = _expert_changes(args, manifest)
    posters = check_posters(args.exclude_poster)
    began = time.perf_counter()
    rows, inputs, excluded, key = _read(args, since, until, posters)
    read_s = time.perf_counter() - began
    refit = GateRefit(
        source,
        holdout=args.holdout,
        combiner=args.combiner,
        params=overrides or None,
        random_state=args.seed,
        add=added,
        retire=args.retire_expert,
        verbose=not args.quiet,
    )
    if posters:
        print(
            f"excluded {sum(excluded.values()):,} outcome rows posted by "
            + ", ".join(f"{p} ({k:,})" for p, k in excluded.items())
        )
    check_rows(rows, manifest)
    data = _inputs(args, rows, inputs, key)
    print_start(args, (source, manifest), (len(rows), data, read_s), gate_name, overrides)
    t0 = time.perf_counter()
    refit.fit(data.X, data.y, data.record_us, None if args.quiet else progress(len(rows)))
    fit_s = time.perf_counter() - t0
    for line in [*expert_lines(refit), *comparison_lines(refit, source.name)]:
        print(line)
    promote = bool(args.promote_if_better and refit.better)
    t_export = time.perf_counter()
    path = write(args, refit, data, source, (gate_name, overrides), excluded, fit_s, promote)
    export_s = time.perf_counter() - t_export
    if promote:
        print(f"wrote {path} and pointed {path.parent / 'LATEST'} at it (better beyond one SE)")
    elif args.stage:
        _stage(args, path)
    else:
        why = "" if not args.promote_if_better else " (not better by more than one SE)"
        print(
            f"staged {path}{why}; serve it with: iabma promote --store {args.store} "
            f"--name {args.name} {path.name}"
        )
    total = time.perf_counter() - began
    print(
        f"timings: read {read_s:.1f} s, experts and gate {fit_s:.1f} s, export "
        f"{export_s:.1f} s, total {total:.1f} s"
    )
    return 0


def _stage(args: argparse.Namespace, path: Path) -> None:
    """Point ``STAGED`` at the written version; a refusal names why."""
    from app.bundle.pointer import RolloutError
    from app.bundle.staged import stage
    from training.errors import ParameterError

    try:
        stage(args.store, args.name, path.name)
    except RolloutError as exc:
        raise ParameterError("--stage", path.name, str(exc)) from None
    print(f"wrote {path} and pointed {path.parent / 'STAGED'} at it: scored in shadow from now")


def _auto_since(args: argparse.Namespace, until: int | None) -> int:
    """``--since auto``: where the realised NLL changed (:mod:`training.refit.since`)."""
    from training.refit.data import check_posters
    from training.refit.since import auto_since

    store, _ = _engine_and_key(args, False)
    try:
        return auto_since(store.engine, args.name, until, check_posters(args.exclude_poster))
    finally:
        store.close()


def _opened(args: argparse.Namespace) -> tuple[Path, Any]:
    """The version to refit and its manifest; a bad option is named."""
    from app.bundle.loader import BundleError, read_manifest, resolve_version
    from training.errors import ParameterError

    if (args.csv is None) != (args.id_column is None):
        raise ParameterError("--csv", str(args.csv), "and --id-column go together")
    try:
        source = resolve_version(args.store, args.name, args.version)
    except BundleError as exc:
        option = "--version" if args.version else "--name"
        raise ParameterError(option, args.version or args.name, str(exc)) from None
    return source, read_manifest(source)
