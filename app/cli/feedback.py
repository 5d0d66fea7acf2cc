"""``iabma feedback``: post a CSV file of outcomes to a running server, in batches.

Each line names a prediction by its request id (``--id-column``) and, with
``--row-column``, its row (0 otherwise), and gives the outcome (``--outcome-column``): a
class as the server returned the label, or the observed number. Lines with an empty
outcome are skipped and counted. Each batch is stored whole or not at all; a refused batch
stops the run and names the line and column at fault. The batches before it were stored,
and running the same file again is safe: what was stored counts as duplicates.

The key is read from IABMA_FEEDBACK_KEY, else IABMA_API_KEY, or from --key-file. Needs
only the Python client (httpx), never ``training``.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.cli.progress import ProgressBar
from app.cli.text import command
from app.errors import CommandError, option_fault

_ITEM = re.compile(r"^outcomes\[(\d+)\]\.?(\w*)")


def add_parser(sub: Any) -> None:
    p = command(
        sub,
        "feedback",
        "post a CSV file of outcomes to a running server (POST /feedback)",
        __doc__,
    )
    p.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--csv", required=True, type=Path, help="the file of outcomes")
    p.add_argument("--id-column", required=True, help="the column of request ids")
    p.add_argument("--outcome-column", required=True, help="the column of outcomes")
    p.add_argument("--row-column", help="the column of rows within a request (default: 0)")
    p.add_argument("--batch-rows", type=int, default=1000, help="outcomes per request (1000)")
    p.add_argument("--delimiter", default=",", help="the CSV's delimiter (,)")
    p.add_argument("--key-file", type=Path, help="a file holding the feedback (or API) key")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request (30)")
    p.set_defaults(run=run)


@dataclass(frozen=True)
class Line:
    number: int  # in the file, the header being line 1
    item: dict[str, Any]


def read_lines(args: argparse.Namespace) -> tuple[list[Line], int]:
    """The file's outcomes, and how many lines had an empty outcome."""
    try:
        handle = args.csv.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise CommandError(option_fault("--csv", str(args.csv), f"cannot be read: {exc}")) from None
    with handle:
        reader = csv.DictReader(handle, delimiter=args.delimiter)
        header = reader.fieldnames or []
        for option, column in (
            ("--id-column", args.id_column),
            ("--outcome-column", args.outcome_column),
            ("--row-column", args.row_column),
        ):
            if column is not None and column not in header:
                shown = ", ".join(header[:20])
                raise CommandError(option_fault(option, column, f"is not a column ({shown})"))
        lines, skipped = [], 0
        for row in reader:
            number = reader.line_num
            outcome = (row.get(args.outcome_column) or "").strip()
            if not outcome:
                skipped += 1
                continue
            item: dict[str, Any] = {"request_id": (row.get(args.id_column) or "").strip()}
            if args.row_column is not None:
                text = (row.get(args.row_column) or "").strip()
                if not text.isdigit():
                    raise CommandError(
                        f"line {number}, column {args.row_column!r}: expected a row number "
                        f"(0, 1, ...), got {text!r}"
                    )
                item["row"] = int(text)
            item["outcome"] = outcome
            lines.append(Line(number, item))
    return lines, skipped


def _key(args: argparse.Namespace) -> str | None:
    if args.key_file is not None:
        try:
            return args.key_file.read_text(encoding="utf-8").strip() or None
        except OSError as exc:
            raise CommandError(option_fault("--key-file", str(args.key_file), str(exc))) from None
    return os.environ.get("IABMA_FEEDBACK_KEY") or os.environ.get("IABMA_API_KEY") or None


def run(args: argparse.Namespace) -> int:
    try:
        from app.client import Client, ClientError
    except ImportError as exc:
        raise CommandError(
            f"needs the Python client ({exc.name} is missing): pip install 'iabma[client]'"
        ) from None
    if args.batch_rows < 1:
        raise CommandError(option_fault("--batch-rows", args.batch_rows, "must be at least 1"))
    lines, skipped = read_lines(args)
    columns = {"request_id": args.id_column, "row": args.row_column or "row",
               "outcome": args.outcome_column}  # fmt: skip
    bar = ProgressBar(len(lines), "outcomes")
    accepted = duplicates = 0
    began = time.perf_counter()
    try:
        with Client(args.url, api_key=_key(args), timeout=args.timeout) as client:
            for start in range(0, len(lines), args.batch_rows):
                batch = lines[start : start + args.batch_rows]
                try:
                    done = client.feedback([line.item for line in batch], batch_rows=len(batch))
                except ClientError as err:
                    bar.close()
                    raise CommandError(_fault(err, batch, columns, start)) from None
                accepted += done.accepted
                duplicates += done.duplicates
                bar.update(start + len(batch))
    except ValueError as exc:  # a URL the client refuses
        raise CommandError(option_fault("--url", args.url, str(exc))) from None
    bar.close()
    took = time.perf_counter() - began
    rate = f", {len(lines) / took:,.0f}/s" if took > 0 else ""
    print(
        f"{len(lines):,} outcomes: {accepted:,} accepted, {duplicates:,} duplicates "
        f"({took:.1f} s{rate}); {skipped:,} lines without an outcome skipped"
    )
    return 0


def _fault(err: Any, batch: list[Line], columns: dict[str, str], start: int) -> str:
    """The server's fault, at the file's line and column; what the earlier batches did."""
    stored = f"the {start:,} outcomes before this batch were stored" if start else "none stored"
    match = _ITEM.match(err.field or "")
    if match is None or int(match.group(1)) >= len(batch):
        return f"{err}; {stored}"
    line = batch[int(match.group(1))].number
    column = columns.get(match.group(2))
    where = f"line {line}" + (f", column {column!r}" if column else "")
    message = err.message.split(": ", 1)[-1] if err.message.startswith(err.field) else err.message
    return f"{where}: {message} (HTTP {err.status}); {stored}, and running the file again is safe"
