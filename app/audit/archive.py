"""Moving old records to Parquet (``iabma audit-archive``): one file per day and version,
a manifest of row counts and checksums, the chain's links over them, and a check of all
of it against the key before anything is deleted.

Each file holds the records as stored (so their digests can be checked again) beside
readable columns: the request id as text, the time, model, version, top expert, latency.
``links.parquet`` holds the links that cover them; the manifest each chain's first link's
predecessor and last link, so that ``audit-verify`` of the live trail goes on from there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute
import pyarrow.parquet as pq
from sqlalchemy import Engine, and_, delete, or_, select

from app.audit.chain import Link, expected_mac, genesis
from app.audit.codec import unpack_request_id
from app.audit.records import LOG_COLUMNS
from app.audit.retention import _ends, _write_cuts
from app.audit.tables import archived, cuts, links, records
from app.audit.verify import Report, compare
from app.audit.versions import ReaderVersions

MANIFEST = "manifest.json"
LINKS_FILE = "links.parquet"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STORED = ("id", "chain", "seq", *LOG_COLUMNS)
DAY_US = 86_400_000_000


def day_of(us: int) -> str:
    return (_EPOCH + timedelta(microseconds=int(us))).strftime("%Y-%m-%d")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class Written:
    records: int = 0
    files: list[dict[str, Any]] = field(default_factory=list)


def _covered(ends: dict[int, tuple[int, bytes]]) -> Any:
    c = records.c
    return or_(*[and_(c.chain == ch, c.seq <= seq) for ch, (seq, _) in ends.items()])


def _rows(engine: Engine, ends: dict[int, tuple[int, bytes]], before: int) -> Iterator[Any]:
    c = records.c
    query = select(*[c[name] for name in STORED]).where(c.created_us < before, _covered(ends))
    with engine.connect() as conn:
        yield from conn.execution_options(stream_results=True, yield_per=50_000).execute(
            query.order_by(c.created_us)
        )


def _table(rows: list[Any], versions: ReaderVersions) -> pa.Table:
    cols = list(zip(*rows, strict=True))
    stored = dict(zip(STORED, cols, strict=True))
    by_id = {vid: versions.get(int(vid)) for vid in set(stored["version_id"])}
    vs = [by_id[vid] for vid in stored["version_id"]]
    names = {vid: v.expert_names for vid, v in by_id.items()}
    readable = {
        "request": [unpack_request_id(r) for r in stored["request_id"]],
        "time": pa.array(stored["created_us"], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "model": [v.model for v in vs],
        "version": [v.version for v in vs],
        "route": [v.route for v in vs],
        "top_expert": [
            names[vid][k] for vid, k in zip(stored["version_id"], stored["top"], strict=True)
        ],
        "latency_ms": pa.compute.divide(pa.array(stored["latency_us"], pa.float64()), 1000.0),
        "experts": [v.experts for v in vs],
        "classes": [v.classes for v in vs],
    }
    types = {"request_id": pa.binary(), "input_hash": pa.binary(), "answer": pa.binary()}
    raw = {k: pa.array(v, types.get(k)) for k, v in stored.items()}
    return pa.table({**readable, **raw})


def write(
    engine: Engine, before_us: int, out: Path
) -> tuple[Written, dict[int, tuple[int, bytes]]]:
    """Write the records of the links wholly before ``before_us``, their links and the
    manifest; the chains' ends archived (what ``--delete`` then removes)."""
    out.mkdir(parents=True, exist_ok=True)
    ends = _ends(engine, before_us)
    written = Written()
    if not ends:
        return written, ends
    versions = ReaderVersions(engine)
    groups: dict[tuple[str, str], list[Any]] = {}
    days: dict[int, str] = {}
    labels: dict[int, str] = {}
    at_v, at_t = STORED.index("version_id"), STORED.index("created_us")
    for row in _rows(engine, ends, before_us):
        vid, d = row[at_v], row[at_t] // DAY_US
        label = labels.get(vid)
        if label is None:
            label = labels[vid] = versions.get(int(vid)).version
        day = days.get(d)
        if day is None:
            day = days[d] = day_of(d * DAY_US)
        groups.setdefault((day, label), []).append(row)
    for (day, version), rows in sorted(groups.items()):
        path = out / day / f"{version}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_table(rows, versions), path)
        written.files.append({"file": str(path.relative_to(out)), "day": day, "rows": len(rows)})
        written.records += len(rows)
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
    for item in written.files:
        item["sha256"] = _sha256(out / item["file"])
    manifest = {
        "before_us": before_us,
        "records": written.records,
        "files": written.files,
        "links": {"file": LINKS_FILE, "rows": len(link_rows), "sha256": _sha256(out / LINKS_FILE)},
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
    return written, ends


def check(out: Path, key: bytes, progress: Callable[[int], None] | None = None) -> Report:
    """Check an archive: checksums and counts, then every record against its link, and
    every link against the key and the link before it."""
    report = Report()
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    for item in [*manifest["files"], manifest["links"]]:
        path = out / item["file"]
        if not path.is_file():
            report.findings.append(f"missing: {item['file']}")
            continue
        if _sha256(path) != item["sha256"]:
            report.findings.append(f"altered: {item['file']} (checksum)")
        if pq.read_metadata(path).num_rows != item["rows"]:
            report.findings.append(f"altered: {item['file']} (row count)")
    table = pq.read_table(out / LINKS_FILE).to_pylist()
    want = {(r["chain"], r["seq"]): Link(**r) for r in table}
    report.links = len(want)
    for ch, span in manifest["chains"].items():
        chain = int(ch)
        prev_mac = bytes.fromhex(span["after_mac"]) if span["after_mac"] else genesis(key, chain)
        for seq in range(span["after_seq"] + 1, span["through_seq"] + 1):
            link = want.get((chain, seq))
            if link is None:
                report.findings.append(f"deleted: chain {chain} link {seq} from {LINKS_FILE}")
                continue
            if expected_mac(key, link) != link.mac or link.prev != prev_mac:
                report.findings.append(f"altered: chain {chain} link {seq} (bad MAC)")
            prev_mac = link.mac
        if prev_mac.hex() != span["through_mac"]:
            report.findings.append(f"altered: chain {chain}'s last link in the manifest")
    found: dict[tuple[int, int], list[tuple[int, bytes, bytes]]] = {}
    from app.audit.chain import row_digest

    for item in manifest["files"]:
        t = pq.read_table(out / item["file"], columns=list(STORED)).to_pydict()
        for i in range(len(t["id"])):
            values = tuple(t[name][i] for name in LOG_COLUMNS)
            key_ = (t["chain"][i], t["seq"][i])
            found.setdefault(key_, []).append((t["id"][i], row_digest(values), t["request_id"][i]))
            report.records += 1
        if progress is not None:
            progress(report.records)
    for key_, link in want.items():
        compare(link, sorted(found.pop(key_, [])), report)
    for key_, recs in found.items():
        for rec in recs:
            report.findings.append(f"inserted: record id {rec[0]} (no link {key_} in the archive)")
    return report


def delete_archived(
    engine: Engine,
    key: bytes,
    before_us: int,
    ends: dict[int, tuple[int, bytes]],
    day_of_id: Callable[[Any], str] = day_of,
) -> int:
    """Remove what :func:`write` archived: the cuts first, then a note of each request id
    (for the 410), the records, and their links."""
    if not ends:
        return 0
    _write_cuts(engine, key, ends, before_us)
    c = records.c
    done = 0
    where = [c.created_us < before_us, _covered(ends)]
    while True:
        with engine.begin() as conn:
            rows = conn.execute(
                # In the time index's order: ordered by id, each batch would sort all
                # that is left.
                select(c.id, c.request_id, c.created_us)
                .where(*where)
                .order_by(c.created_us)
                .limit(5_000)
            ).all()
            if not rows:
                break
            days: dict[int, str] = {}
            notes = []
            for r in rows:
                d = r[2] // DAY_US
                day = days.get(d)
                if day is None:
                    day = days[d] = day_of_id(d * DAY_US)
                notes.append((r[1], day))
            # Plain executemany: SQLAlchemy's 5,000 bound names per batch cost more than
            # the deletes.
            m = "?" if conn.dialect.paramstyle == "qmark" else "%s"
            conn.exec_driver_sql(
                f"INSERT INTO {archived.name} (request_id, day) VALUES ({m}, {m})", notes
            )
            conn.exec_driver_sql(
                f"DELETE FROM {records.name} WHERE id = {m}", [(r[0],) for r in rows]
            )
        done += len(rows)
    with engine.begin() as conn:
        for chain, (seq, _) in ends.items():
            conn.execute(delete(links).where(links.c.chain == chain, links.c.seq <= seq))
    return done
