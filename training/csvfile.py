"""Reading a user's CSV file: encoding, delimiter, header, and typed columns by the input rule.

Every cell is read as text first and then typed by the same rule the served bundle applies
to JSON (:mod:`app.bundle.normalise`), so the file and the server agree on what each cell
means. Faults are :class:`~training.errors.CsvError` naming the file and the column, raised
before anything is fitted.
"""

from __future__ import annotations

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
from training.errors import CsvError, DataWarning
from training.features import warn_mostly_numeric

DELIMITERS = ",;\t|"
_SNIFF_BYTES = 64 * 1024


def _decode(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise CsvError(
            path,
            f"is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start} (line "
            f"{line}); re-save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)",
        ) from None


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


def read_text_frame(path: Path | str) -> tuple[pd.DataFrame, str]:
    """Every cell of the file as a string (``""`` for an empty cell), and the delimiter."""
    path = Path(path)
    if not path.is_file():
        raise CsvError(path, "does not exist")
    raw = path.read_bytes()
    if not raw.strip():
        raise CsvError(path, "is empty")
    text = _decode(path, raw)
    delimiter = sniff_delimiter(text)
    try:
        header = next(csv.reader(io.StringIO(text), delimiter=delimiter))
    except (csv.Error, StopIteration) as exc:
        raise CsvError(path, f"has no readable header: {exc}") from None
    names = [h if h != "" else f"Unnamed: {i}" for i, h in enumerate(header)]
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise CsvError(path, "appears twice in the header; column names must be unique", name)
        seen.add(name)
    try:
        df = pd.read_csv(
            io.StringIO(text),
            sep=delimiter,
            header=0,
            names=names,
            dtype=str,
            keep_default_na=False,
            na_filter=False,
            skip_blank_lines=True,
        )
    except (pd.errors.ParserError, ValueError) as exc:
        raise CsvError(path, f"is not a readable CSV: {exc}") from None
    if len(df) == 0:
        raise CsvError(path, "has a header but no data rows")
    return df, delimiter


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
    warn of constant ones."""
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
            warnings.warn(
                f"{path}: column {name!r} holds the same value ({col.iloc[0]!r}) in every "
                "row, so it tells the models nothing; drop it (--drop) unless it varies in "
                "the data you will serve",
                DataWarning,
                stacklevel=2,
            )
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
