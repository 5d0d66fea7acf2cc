"""Moving old records to Parquet (``iabma audit-archive``): one file per day and version,
a manifest of row counts and checksums, the chain's links over them, and a check of all
of it against the key before anything is deleted.

Each file holds the records as stored (so their digests can be checked again) beside
readable columns: the request id as text, the time, model, version, top expert, latency.
``links.parquet`` holds the links that cover them; the manifest each chain's first link's
predecessor and last link, so that ``audit-verify`` of the live trail goes on from there.
``outcomes.parquet`` holds the outcomes of the records archived, as stored: they leave the
trail with their records.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import Engine, and_, or_, select

from app.audit.check.verify import Rec, Report, compare
from app.audit.lifecycle.archive_delete import covered_sql
from app.audit.lifecycle.archive_delete import delete_archived as delete_archived  # its command
from app.audit.lifecycle.archive_outcomes import write_outcomes
from app.audit.lifecycle.archive_table import STORED, with_readable
from app.audit.lifecycle.arrow_read import stored_parts
from app.audit.lifecycle.retention import DAY_US, _ends
from app.audit.store.chain import DIGEST_BYTES, Link, expected_mac, genesis, row_digest
from app.audit.store.records import LOG_COLUMNS
from app.audit.store.tables import cuts, links
from app.audit.store.version_rows import ReaderVersions

MANIFEST = "manifest.json"
LINKS_FILE = "links.parquet"
OUTCOMES_FILE = "outcomes.parquet"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def day_of(us: int) -> str:
    return (_EPOCH + timedelta(microseconds=int(us))).strftime("%Y-%m-%d")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _sync(path: Path) -> None:
    """Put a file, or a directory's entries, on the disk: ``--delete`` may remove records
    only once their archive would outlive a crash. Each file as soon as it is written,
    so that the disk takes the archive in pieces rather than at once."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Written:
    records: int = 0
    files: list[dict[str, Any]] = field(default_factory=list)
    outcomes: int = 0
    outcomes_through: int = 0  # the largest id of the outcomes written


FETCH = 50_000  # records a fetch: a few MB of Arrow columns at a time


def _fetch(
    engine: Engine, ends: dict[int, tuple[int, bytes]], before: int, put: Callable[[Any], bool]
) -> None:
    """Hand ``put`` the records to archive, in time order, :data:`FETCH` at a time, until
    it says stop; then None."""
    where = f"created_us < {int(before)} AND {covered_sql(ends)}"
    with closing(stored_parts(engine, where, FETCH)) as parts:
        for part in parts:
            if not put(part):
                break


def _parts(engine: Engine, ends: dict[int, tuple[int, bytes]], before: int) -> Iterator[pa.Table]:
    """:func:`_fetch`'s parts, fetched on a thread while the files of the last are written:
    the reading (ADBC's C, and on SQLite a child process) and Parquet's writer work without
    the GIL."""
    ready: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            _fetch(engine, ends, before, put)
            put(None)
        except BaseException as exc:  # handed on, raised by the reader
            put(exc)

    thread = threading.Thread(target=run, name="iabma-archive-fetch", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def _write_records(
    engine: Engine, ends: dict[int, tuple[int, bytes]], before: int, out: Path
) -> Written:
    """One file per day and version. The records come in time order, so a day's files
    are complete, and written, once a later day comes."""
    versions = ReaderVersions(engine)
    labels: dict[int, str] = {}
    pending: dict[tuple[int, str], list[pa.Table]] = {}
    written = Written()

    def flush(through_day: float) -> None:
        for key in sorted(k for k in pending if k[0] < through_day):
            day, version = day_of(key[0] * DAY_US), key[1]
            table = with_readable(pa.concat_tables(pending.pop(key)), versions)
            path = out / day / f"{version}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            _sync(path)
            written.files.append({"file": str(path.relative_to(out)), "day": day,
                                  "rows": table.num_rows})  # fmt: skip
            written.records += table.num_rows

    for part in _parts(engine, ends, before):
        days = part.column("created_us").to_numpy() // DAY_US
        vids = part.column("version_id").to_numpy()
        for v in np.unique(vids):
            if int(v) not in labels:
                labels[int(v)] = versions.get(int(v)).version
        for day in np.unique(days):
            in_day = days == day
            for v in np.unique(vids[in_day]):
                rows = np.flatnonzero(in_day & (vids == v))
                pending.setdefault((int(day), labels[int(v)]), []).append(part.take(rows))
        flush(int(days[-1]))
    flush(float("inf"))
    return written


def write(
    engine: Engine, before_us: int, out: Path
) -> tuple[Written, dict[int, tuple[int, bytes]]]:
    """Write the records of the links wholly before ``before_us``, their links and the
    manifest; the chains' ends archived (what ``--delete`` then removes)."""
    out.mkdir(parents=True, exist_ok=True)
    ends = _ends(engine, before_us)
    if not ends:
        return Written(), ends
    written = _write_records(engine, ends, before_us, out)
    lc = links.c
    with engine.connect() as conn:
        start = {
            int(r.chain): (int(r.through_seq), bytes(r.mac_at)) for r in conn.execute(select(cuts))
        }
        link_rows = conn.execute(
            select(lc.chain, lc.seq, lc.created_us, lc.digests, lc.prev, lc.mac)
            .where(or_(*[and_(lc.chain == ch, lc.seq <= seq) for ch, (seq, _) in ends.items()]))
            .order_by(lc.chain, lc.seq)
        ).all()
    names = ("chain", "seq", "created_us", "digests", "prev", "mac")
    pq.write_table(
        pa.table({n: [r[k] for r in link_rows] for k, n in enumerate(names)}), out / LINKS_FILE
    )
    written.outcomes, written.outcomes_through = write_outcomes(
        engine, f"created_us < {int(before_us)} AND {covered_sql(ends)}", out / OUTCOMES_FILE
    )
    for item in written.files:
        item["sha256"] = _sha256(out / item["file"])
    manifest = {
        "before_us": before_us,
        "records": written.records,
        "files": written.files,
        "links": {"file": LINKS_FILE, "rows": len(link_rows), "sha256": _sha256(out / LINKS_FILE)},
        "outcomes": {
            "file": OUTCOMES_FILE,
            "rows": written.outcomes,
            "sha256": _sha256(out / OUTCOMES_FILE),
            "through_id": written.outcomes_through,
        },
        # Per chain: the link the archive starts after (0: the chain's start) and its last.
        "chains": {
            str(ch): {
                "after_seq": start.get(ch, (0, b""))[0],
                "after_mac": start[ch][1].hex() if ch in start else None,
                "through_seq": seq,
                "through_mac": mac.hex(),
            }
            for ch, (seq, mac) in ends.items()
        },
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    days = {(out / item["file"]).parent for item in written.files}
    for path in (out / LINKS_FILE, out / OUTCOMES_FILE, out / MANIFEST, *days, out):
        _sync(path)
    return written, ends


def check(out: Path, key: bytes, progress: Callable[[int], None] | None = None) -> Report:
    """Check an archive: checksums and counts, then every record against its link, and
    every link against the key and the link before it."""
    report = Report()
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    extra = [manifest["outcomes"]] if "outcomes" in manifest else []
    for item in [*manifest["files"], manifest["links"], *extra]:
        path = out / item["file"]
        if not path.is_file():
            report.entries.append(f"missing: {item['file']}")
            continue
        if _sha256(path) != item["sha256"]:
            report.entries.append(f"altered: {item['file']} (checksum)")
        if pq.read_metadata(path).num_rows != item["rows"]:
            report.entries.append(f"altered: {item['file']} (row count)")
    table = pq.read_table(out / LINKS_FILE).to_pylist()
    want = {(r["chain"], r["seq"]): Link(**r) for r in table}
    report.links = len(want)
    for ch, span in manifest["chains"].items():
        chain = int(ch)
        prev_mac = bytes.fromhex(span["after_mac"]) if span["after_mac"] else genesis(key, chain)
        for seq in range(span["after_seq"] + 1, span["through_seq"] + 1):
            link = want.get((chain, seq))
            if link is None:
                report.entries.append(f"deleted: chain {chain} link {seq} from {LINKS_FILE}")
                continue
            if expected_mac(key, link) != link.mac or link.prev != prev_mac:
                report.entries.append(f"altered: chain {chain} link {seq} (bad MAC)")
            prev_mac = link.mac
        if prev_mac.hex() != span["through_mac"]:
            report.entries.append(f"altered: chain {chain}'s last link in the manifest")
    _check_records(out, manifest, want, report, progress)
    return report


def _check_records(
    out: Path,
    manifest: dict[str, Any],
    want: dict[tuple[int, int], Link],
    report: Report,
    progress: Callable[[int], None] | None,
) -> None:
    """Every record's digest against its link's. The records of a link may lie in several
    files (a group that spans midnight, or versions): all are read, then sorted by link
    and id, and a link whose digests match as a whole is done without a step per record."""
    keys, digests, request_ids = [], [], []
    for item in manifest["files"]:
        path = out / item["file"]
        if not path.is_file():
            continue  # named above
        t = pq.read_table(path, columns=list(STORED))
        values = [t.column(name).to_pylist() for name in LOG_COLUMNS]
        digests.append(b"".join(map(row_digest, zip(*values, strict=True))))
        keys.append(
            np.stack([pc.fill_null(t.column(n), -1).to_numpy() for n in ("chain", "seq", "id")])
        )
        request_ids.extend(t.column("request_id").chunks)
        report.records += t.num_rows
        if progress is not None:
            progress(report.records)
    done: set[tuple[int, int]] = set()
    if keys:
        chain, seq, ids = np.concatenate(keys, axis=1)
        order = np.lexsort((ids, seq, chain))
        d = np.frombuffer(b"".join(digests), np.uint8).reshape(-1, DIGEST_BYTES)[order]
        chain, seq, ids = chain[order], seq[order], ids[order]
        rids = pa.chunked_array(request_ids, pa.binary())
        new = np.flatnonzero((chain[1:] != chain[:-1]) | (seq[1:] != seq[:-1])) + 1
        bounds = [0, *new.tolist(), len(order)]
        for lo, hi in itertools.pairwise(bounds):
            key_ = (int(chain[lo]), int(seq[lo]))
            link = want.get(key_)
            if link is not None and d[lo:hi].tobytes() == link.digests:
                done.add(key_)
                continue
            recs = [
                Rec(int(ids[i]), d[i].tobytes(), rids[int(order[i])].as_py()) for i in range(lo, hi)
            ]
            if link is None:
                for rec in recs:
                    report.entries.append(f"inserted: {rec} (no link {key_} in the archive)")
                continue
            compare(link, sorted(recs, key=lambda r: r.id), report.entries)
            done.add(key_)
    for key_, link in want.items():
        if key_ not in done:
            compare(link, [], report.entries)
