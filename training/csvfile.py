"""Reading a user's CSV file: encoding, delimiter, header, and typed columns by the input rule.

Every cell is read as text first and then typed by the same rule the served bundle applies
to JSON (:mod:`app.bundle.normalise`), so the file and the server agree on what each cell
means. Faults are :class:`~training.errors.CsvError` naming the file and the column, raised
before anything is fitted.
"""

from __future__ import annotations

import codecs
import csv
import io
import math
import re
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from app.bundle.normalise import Normaliser
from training.csvsize import check_fits, check_sample_rows, sample_text
from training.errors import CsvError, DataWarning, ParameterError
from training.hints import warn_identifier, warn_mostly_numeric

DELIMITERS = ",;\t|"
_SNIFF_BYTES = 64 * 1024


def check_encoding(encoding: str | None) -> str | None:
    """``--encoding`` as Python names it, or None to read UTF-8 (a BOM decides otherwise)."""
    if encoding is None:
        return None
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        info = None
    # codecs also holds bytes-to-bytes ones (hex, base64, rot13), which decode no text.
    if info is None or not getattr(info, "_is_text_encoding", True):
        raise ParameterError(
            "--encoding", encoding, "is not a text encoding Python knows (e.g. utf-8, cp1252)"
        )
    return info.name


def _decode(path: Path, raw: bytes, encoding: str | None = None) -> str:
    # Excel's "Unicode text" export is UTF-16 with a byte-order mark, which says so itself.
    by_mark = encoding is None and raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    if by_mark:
        encoding = "utf-16"
    try:
        text = raw.decode(encoding or "utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        where = f"byte 0x{raw[exc.start]:02x} at offset {exc.start} (line {line})"
        if by_mark:
            raise CsvError(path, f"starts as UTF-16 but is not UTF-16 text: {where}") from None
        if encoding is not None:
            raise CsvError(path, f"is not {encoding} text: {where}; check --encoding") from None
        raise CsvError(path, f"is not UTF-8 text: {where}; {_encoding_hint(raw)}") from None
    # A UTF-8 byte-order mark (Excel's "CSV UTF-8") is not part of the first column's name.
    return text.removeprefix("\ufeff")


def _encoding_hint(raw: bytes) -> str:
    """What to try instead of UTF-8. Windows programs (Excel's CSV export among them) write
    cp1252, which also reads latin-1 text, and unlike latin-1 keeps "€" a euro sign."""
    try:
        raw.decode("cp1252")
    except UnicodeDecodeError:
        return "pass the file's encoding with --encoding, or re-save it as UTF-8"
    return (
        "if a Windows program such as Excel wrote it, pass --encoding cp1252; or re-save "
        "it as UTF-8"
    )


def sniff_delimiter(text: str) -> str:
    """The delimiter of ``text``: the sniffer's answer, else the header's commonest one."""
    sample = text[:_SNIFF_BYTES]
    header = sample.split("\n", 1)[0]
    try:
        found = csv.Sniffer().sniff(sample, delimiters=DELIMITERS).delimiter
    except csv.Error:
        found = ""
    counts = {d: header.count(d) for d in DELIMITERS}
    best = max(counts, key=lambda d: counts[d])
    # The sniffer can pick a delimiter that appears only inside quoted header names.
    if found and counts.get(found, 0) > 0:
        return found
    return best if counts[best] > 0 else ","


def read_text_frame(
    path: Path | str,
    encoding: str | None = None,
    sample_rows: int | None = None,
    seed: int = 0,
    memory_limit: int | None = None,
) -> tuple[pd.DataFrame, str]:
    """Every cell of the file as a string (``""`` for an empty cell), and the delimiter.

    The frame's index is each row's 0-based data row in the file: rows that repeat the
    header (files pasted together) are dropped with a warning, and the others keep their
    numbers. ``sample_rows`` reads a uniform random sample of that many rows (``seed``);
    otherwise a file too large for ``memory_limit`` (default: the memory available) is
    refused before it is read (:mod:`training.csvsize`).
    """
    path = Path(path)
    if not path.is_file():
        raise CsvError(path, "does not exist")
    encoding = check_encoding(encoding)
    numbers = None
    rows = check_sample_rows(sample_rows)
    if rows is not None:
        raw, numbers = sample_text(path, rows, seed, encoding)
        encoding = "utf-8"
    else:
        check_fits(path, memory_limit)
        raw = path.read_bytes()
    if not raw.strip():
        raise CsvError(path, "is empty")
    text = _decode(path, raw, encoding)
    delimiter = sniff_delimiter(text)
    header, names = _header(path, text, delimiter)
    _check_widths(path, text, delimiter, len(header))
    try:
        with warnings.catch_warnings():
            # Extra fields are empty ones (checked above): a delimiter closing each row.
            warnings.simplefilter("ignore", pd.errors.ParserWarning)
            df = pd.read_csv(
                io.StringIO(text),
                sep=delimiter,
                header=0,
                names=names,
                dtype=str,
                keep_default_na=False,
                na_filter=False,
                skip_blank_lines=True,
                index_col=False,
            )
    except (pd.errors.ParserError, ValueError) as exc:
        raise CsvError(path, f"is not a readable CSV: {exc}") from None
    if numbers is not None and len(numbers) == len(df):
        df.index = pd.Index(numbers)
    df = _drop_header_repeats(path, df, header)
    if len(df) == 0:
        raise CsvError(path, "has a header but no data rows")
    return df, delimiter


def _header(path: Path, text: str, delimiter: str) -> tuple[list[str], list[str]]:
    """The header as written, and the column names (unnamed ones named); warns of names
    that clients could not type as they are."""
    try:
        header = next(csv.reader(io.StringIO(text), delimiter=delimiter))
    except (csv.Error, StopIteration) as exc:
        raise CsvError(path, f"has no readable header: {exc}") from None
    seen: set[str] = set()
    for name in header:
        if name != "" and name in seen:
            raise CsvError(path, "appears twice in the header; column names must be unique", name)
        seen.add(name)
    names = _unnamed(header)
    spaced = [n for n in names if n != n.strip()]
    if spaced:
        warnings.warn(
            f"{path}: column names {spaced} begin or end with spaces, which clients must "
            "send too; rename them in the file if that is not meant",
            DataWarning,
            stacklevel=3,
        )
    # A no-break space or a tab looks like a space, and clients type a space.
    odd = [n for n in names if any(ch.isspace() and ch != " " for ch in n.strip())]
    if odd:
        warnings.warn(
            f"{path}: column names {odd} hold spaces other than the plain one (no-break "
            "spaces, tabs), which clients must send exactly; rename them in the file if "
            "that is not meant",
            DataWarning,
            stacklevel=3,
        )
    return header, names


def _unnamed(header: list[str]) -> list[str]:
    """Empty header cells named as pandas names them: ``Unnamed: <position>``, with ``.1``,
    ``.2`` ... when the file has that name already (a frame read with its index and written
    again has both ``""`` and ``Unnamed: 0``), so that a pandas client's columns match."""
    taken = set(header)
    names = []
    for i, h in enumerate(header):
        if h == "":
            h, k = f"Unnamed: {i}", 0
            while h in taken:
                k += 1
                h = f"Unnamed: {i}.{k}"
            taken.add(h)
        names.append(h)
    return names


def _check_widths(path: Path, text: str, delimiter: str, width: int) -> None:
    """Refuse a data row with more values than the header has names: pandas would take the
    first column as the rows' index (R's row names) or drop the values at the end."""
    rows = csv.reader(io.StringIO(text), delimiter=delimiter)
    next(rows, None)
    number = 0
    try:
        for row in rows:
            if not row:
                continue  # a blank line, which pandas skips too
            number += 1
            if len(row) > width and any(cell.strip() for cell in row[width:]):
                raise CsvError(
                    path,
                    f"data row {number} has {len(row)} values but the header names {width} "
                    "columns; give every column a name (a first column of row names needs "
                    "one too)",
                )
    except csv.Error:
        return  # e.g. a cell beyond the csv module's size limit: pandas reads it, or says why


def _drop_header_repeats(path: Path, df: pd.DataFrame, header: list[str]) -> pd.DataFrame:
    if len(df) == 0 or not any(h.strip() for h in header):
        return df
    same = np.ones(len(df), dtype=bool)
    for name, cell in zip(df.columns, header, strict=True):
        same &= (df[name].str.strip() == cell.strip()).to_numpy()
    if not same.any():
        return df
    rows = (df.index[same] + 1).tolist()
    shown = ", ".join(str(r) for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
    warnings.warn(
        f"{path}: dropped {len(rows)} row{'s' if len(rows) > 1 else ''} repeating the header "
        f"(data row{'s' if len(rows) > 1 else ''} {shown}), as files pasted together carry",
        DataWarning,
        stacklevel=3,
    )
    return df[~same]


def type_column(values: pd.Series, rule: Normaliser) -> pd.Series | None:
    """A text column typed by ``rule``: float64 (NaN missing) or a pandas Categorical.

    None when every cell is missing.
    """
    text = values.str.strip() if rule.strip_whitespace else values
    uniques = pd.unique(text)
    meaning = {u: rule.text(u) for u in uniques}
    present = [t for t in meaning.values() if t is not None]
    if not present:
        return None
    numbers = {t: rule.number_text(t) for t in set(present)}
    cleaned = text.map(meaning)
    if all(v is not None for v in numbers.values()):
        return cleaned.map(numbers, na_action="ignore").astype(np.float64)
    counts = cleaned.value_counts()
    odd = Counter({t: int(n) for t, n in counts.items() if numbers[t] is None})
    warn_mostly_numeric(str(values.name), int(counts.sum()) - sum(odd.values()), odd)
    return pd.Series(pd.Categorical(cleaned, categories=sorted(set(present))), index=values.index)


def typed_frame(
    path: Path | str, df: pd.DataFrame, rule: Normaliser, keep: Sequence[str] = ()
) -> pd.DataFrame:
    """Type every column; drop the entirely empty ones (except ``keep``) with a warning, and
    warn of constant ones and of identifiers."""
    out = {}
    for name in df.columns:
        col = type_column(df[name], rule)
        if col is None:
            if name in keep:
                raise CsvError(path, "is empty: every value is missing", name)
            warnings.warn(
                f"{path}: column {name!r} is empty (every value is missing); dropped it",
                DataWarning,
                stacklevel=2,
            )
            continue
        if name not in keep and col.nunique(dropna=False) == 1:
            value = col.iloc[0]
            value = value.item() if isinstance(value, np.generic) else value  # 1.0, not np's repr
            warnings.warn(
                f"{path}: column {name!r} holds the same value ({value!r}) in every "
                "row, so it tells the models nothing; drop it (--drop) unless it varies in "
                "the data you will serve",
                DataWarning,
                stacklevel=2,
            )
        elif name not in keep:
            warn_identifier(str(path), name, col)
        out[name] = col
    return pd.DataFrame(out, index=df.index)


def json_rows(frame: pd.DataFrame) -> list[dict[str, object]]:
    """Rows as a plain CSV-to-JSON reader sends them: an empty cell is null, a cell in
    JSON's number grammar a number, anything else the string itself (untouched)."""
    names = [str(c) for c in frame.columns]
    columns = [[_json_cell(v) for v in frame[c].tolist()] for c in frame.columns]
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?", re.ASCII)


def _json_cell(text: str) -> object:
    if text == "":
        return None
    if _JSON_NUMBER.fullmatch(text):
        number = float(text)
        if math.isfinite(number):
            return int(text) if text.lstrip("-").isdigit() else number
    return text
