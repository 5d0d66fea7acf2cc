"""The audit trail's tables (SQLAlchemy Core), and checking or creating them.

``iabma_audit_log`` holds one row per answered request, the answer as compact arrays; two
small tables beside it hold the sums of :mod:`app.audit.read.rollup`, and ``iabma_outcomes``
the outcomes posted for its rows, scored (:mod:`app.audit.write.outcome_rows`).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    insert,
    inspect,
    select,
)
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

# SQLite only auto-increments an INTEGER PRIMARY KEY (its rowid).
_ID = BigInteger().with_variant(Integer, "sqlite")

metadata = MetaData()
REQUEST_KEY = "ux_iabma_audit_log_request"  # the records' unique (request_id, model_id)

# Schema 2 (compact records, docs/design.md): a record is its ids, times and one packed
# blob of arrays (app.audit.store.packing); what records share is in iabma_audit_versions.
# Schema 3: a request id names one record of a model; the versions sealed, outcomes
# chained and kept with their poster (app.audit.lifecycle.upgrade brings a schema-2 trail there).
SCHEMA_VERSION = 3

records = Table(
    "iabma_audit_log",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("request_id", LargeBinary, nullable=False),  # app.audit.store.packing.pack_request_id
    Column("created_us", BigInteger, nullable=False),  # microseconds since the epoch, UTC
    Column("version_id", Integer, nullable=False),  # iabma_audit_versions.id
    Column("n_instances", Integer, nullable=False),
    Column("top", Integer, nullable=False),  # the top expert's position in the version's
    Column("latency_us", Integer, nullable=False),
    Column("input_hash", LargeBinary),  # the 32 bytes of the HMAC-SHA256
    Column("input_json", Text),
    Column("answer", LargeBinary, nullable=False),  # app.audit.store.packing.pack
    # The link of app.audit.store.chain that covers this record: its chain and place in it.
    Column("chain", Integer),
    Column("seq", Integer),
    # iabma_audit_models.id: with the request id, the record's key. NULL only on a record
    # that shared its id with an earlier one of its model before schema 3 (kept as it was).
    # Derived from version_id, so the chain's digests leave it out.
    Column("model_id", Integer),
    # Pages and windows walk time (the model's versions filter it); lookups the id, which
    # names one record of a model: a second commit of it fails, and only that record
    # (app.audit.write.apart). An index per top expert cost 40 bytes a record for one filter of
    # the console.
    Index("ix_iabma_audit_log_time", "created_us"),
    Index(REQUEST_KEY, "request_id", "model_id", unique=True),
)

# A small id per model name, for the records' key (one byte a record on SQLite).
models = Table(
    "iabma_audit_models",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("model", String(128), nullable=False, unique=True),
)

versions = Table(
    "iabma_audit_versions",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("model", String(128), nullable=False),
    Column("version", String(128), nullable=False),
    Column("route", String(32), nullable=False),
    Column("task", String(16), nullable=False),
    Column("input_mode", String(8), nullable=False),
    Column("experts", Text, nullable=False),  # JSON list of names
    Column("classes", Text),  # JSON list of labels (classification)
    # app.audit.store.chain.version_mac of the row's id and values: an edit of the names every
    # record of the version shares is named by audit-verify.
    Column("mac", LargeBinary),
    UniqueConstraint("model", "version", "route", "task", "input_mode", "experts", "classes"),
)

# The trail's schema version (key "schema"), so that a release knows what it opens.
meta = Table(
    "iabma_audit_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(256), nullable=False),
)

# Derived from the records, and rebuilt from them when dropped (app.audit.read.rollup): per
# ten-minute bucket, version, top expert and set of experts, what GET /weights sums.
buckets = Table(
    "iabma_audit_buckets",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("model", String(128), nullable=False),
    Column("bucket_us", BigInteger, nullable=False),
    Column("version", String(128), nullable=False),
    Column("top_expert", String(128), nullable=False),
    Column("experts", Text, nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("instances", BigInteger, nullable=False),
    Column("weight_sums", LargeBinary, nullable=False),
    Column("top_counts", LargeBinary, nullable=False),
    Index("ix_iabma_audit_buckets_time", "model", "bucket_us"),
    # Two readers can never both store a bucket: the second's transaction fails whole.
    UniqueConstraint("model", "bucket_us", "version", "top_expert", "experts"),
)

# One row per outcome posted to POST /feedback: the served row it belongs to, and its
# scores against what was served (app.audit.read.scores), so that GET /performance reads this
# table alone.
outcomes = Table(
    "iabma_outcomes",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("model", String(128), nullable=False),
    Column("request_id", String(128), nullable=False),
    Column("row_index", Integer, nullable=False),
    Column("record_id", BigInteger, nullable=False),  # iabma_audit_log.id
    Column("record_us", BigInteger, nullable=False),  # the prediction's time
    Column("version", String(128), nullable=False),
    Column("received_us", BigInteger, nullable=False),
    Column("outcome", Text, nullable=False),  # JSON: the class label, or the number
    Column("experts", Text, nullable=False),  # JSON list of names
    Column("weights", LargeBinary, nullable=False),  # (m,) float64: the row's weights
    Column("scores", LargeBinary, nullable=False),  # (1 + m, 3) float64: app.audit.read.scores
    # Who posted it: app.core.feedback.poster_of, a fingerprint of the key (never the key);
    # NULL when the route takes no key.
    Column("poster", String(64)),
    # The link of an outcome chain (iabma_outcome_links) that covers it.
    Column("chain", Integer),
    Column("seq", Integer),
    # One outcome per served row: a second insert of one fails whole (POST /feedback's 409).
    UniqueConstraint("model", "request_id", "row_index"),
    Index("ix_iabma_outcomes_time", "model", "record_us"),
    # Outcomes leave with their record (retention, archive), and chains are pruned from
    # their oldest link with no outcome left.
    Index("ix_iabma_outcomes_record", "record_id"),
    Index("ix_iabma_outcomes_link", "chain", "seq"),
)

# app.audit.store.chain: one chain per writer connection, one link per group commit, and per
# chain the keyed cut below which links and records were pruned or archived. Outcomes
# are chained alike, in chains of their own kind (app.audit.write.outcome_chain).
RECORDS, OUTCOMES = "records", "outcomes"  # the kinds of chain
chains = Table(
    "iabma_audit_chains",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("started_us", BigInteger, nullable=False),
    Column("owner", String(128), nullable=False),
    Column("kind", String(16), nullable=False, server_default=RECORDS),
)


def _links_table(name: str) -> Table:
    return Table(
        name,
        metadata,
        Column("chain", Integer, primary_key=True, autoincrement=False),
        Column("seq", Integer, primary_key=True, autoincrement=False),
        Column("created_us", BigInteger, nullable=False),
        Column("digests", LargeBinary, nullable=False),
        Column("prev", LargeBinary, nullable=False),
        Column("mac", LargeBinary, nullable=False),
        Index(f"ix_{name}_time", "created_us"),
    )


links = _links_table("iabma_audit_links")
# An outcome link's digests are, per outcome, its record's id and its digest
# (app.audit.store.chain.ENTRY_BYTES); its time is its transaction's.
outcome_links = _links_table("iabma_outcome_links")


def _cuts_table(name: str) -> Table:
    return Table(
        name,
        metadata,
        Column("chain", Integer, primary_key=True, autoincrement=False),
        Column("through_seq", Integer, nullable=False),
        Column("before_us", BigInteger, nullable=False),
        Column("mac_at", LargeBinary, nullable=False),
        Column("mac", LargeBinary, nullable=False),
    )


cuts = _cuts_table("iabma_audit_cuts")
outcome_cuts = _cuts_table("iabma_outcome_cuts")
# Per kind of chain: its links and its cuts.
CHAIN_TABLES = {RECORDS: (links, cuts), OUTCOMES: (outcome_links, outcome_cuts)}

# Request ids moved to a Parquet archive (app.audit.lifecycle.archive), and the day of their file:
# GET /weights answers 410 naming it.
archived = Table(
    "iabma_audit_archived",
    metadata,
    Column("request_id", LargeBinary, nullable=False),
    Column("day", String(10), nullable=False),
    Index("ix_iabma_audit_archived_request_id", "request_id"),
)

# One row per serving process: the last probe commit (app.audit.write.health), a write that
# tells whether the trail can record while no request comes to try it.
probes = Table(
    "iabma_audit_probe",
    metadata,
    Column("owner", String(128), primary_key=True),
    Column("at_us", BigInteger, nullable=False),
)

# Per model: every sealed bucket before through_us is summed in iabma_audit_buckets.
watermarks = Table(
    "iabma_audit_rollup",
    metadata,
    Column("model", String(128), primary_key=True),
    Column("through_us", BigInteger, nullable=False),
)


class SchemaMismatch(Exception):
    """The trail was written by another release's schema; the message says what to do."""


def check_schema(engine: Engine) -> None:
    """Refuse a trail of schema 1 or 2 (run ``iabma audit-migrate``) or of a newer
    release."""
    look = inspect(engine)
    if not look.has_table(records.name):
        return
    where = engine.url.render_as_string(hide_password=True)
    columns = {c["name"] for c in look.get_columns(records.name)}
    if "experts" in columns:
        raise SchemaMismatch(
            f"the audit trail {where} has schema 1 (written before compact records). Run "
            f"`iabma audit-migrate --audit-url URL` once, with the servers stopped: it "
            f"copies every record into schema {SCHEMA_VERSION} and keeps the old table as "
            "iabma_audit_log_v1 until you drop it"
        )
    found = None
    if look.has_table(meta.name):
        with engine.connect() as conn:
            found = conn.execute(select(meta.c.value).where(meta.c.key == "schema")).scalar()
    if found is not None and int(found) > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"the audit trail {where} has schema {found}, newer than this release's "
            f"{SCHEMA_VERSION}: run the release that wrote it"
        )
    # A schema-2 trail has no model_id; one whose upgrade was interrupted still says 2.
    if "model_id" not in columns or (found is not None and int(found) < SCHEMA_VERSION):
        raise SchemaMismatch(
            f"the audit trail {where} has schema {found or 2}. Run `iabma audit-migrate "
            f"--audit-url URL` once, with the servers stopped: it brings the trail to schema "
            f"{SCHEMA_VERSION} in place, keeping every record (a request id comes to name one "
            "record of a model, the versions are sealed and the outcomes chained)"
        )


def create_tables(engine: Engine) -> None:
    """Create what is missing; tolerate another worker creating it at the same moment."""
    check_schema(engine)
    try:
        metadata.create_all(engine)
    except (IntegrityError, OperationalError, ProgrammingError):
        names = set(inspect(engine).get_table_names())
        if not all(t.name in names for t in metadata.sorted_tables):
            raise
    try:
        with engine.begin() as conn:
            if conn.execute(select(meta.c.value).where(meta.c.key == "schema")).first() is None:
                conn.execute(insert(meta).values(key="schema", value=str(SCHEMA_VERSION)))
    except IntegrityError:
        pass  # another worker wrote it
    analyze_stale(engine)


def analyze_stale(engine: Engine) -> None:
    """PostgreSQL: gather the statistics of tables that changed by a tenth since they were
    last gathered (a trail bulk-loaded or restored before autovacuum came by). Without them
    the planner guesses that a lookup of a thousand request ids matches a quarter of the
    trail, and scans all of it (19 ms instead of 4 for 200,000 records)."""
    if engine.dialect.name != "postgresql":
        return
    names = [t.name for t in metadata.sorted_tables]
    query = (
        "SELECT relname FROM pg_stat_user_tables WHERE schemaname = current_schema() "
        "AND n_mod_since_analyze > GREATEST(1000, n_live_tup / 10) AND relname = ANY(%s)"
    )
    with engine.connect() as conn:
        found = [row[0] for row in conn.exec_driver_sql(query, (names,)).fetchall()]
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for name in found:
            conn.exec_driver_sql(f"ANALYZE {name}")
