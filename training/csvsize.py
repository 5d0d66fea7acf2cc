"""Whether a CSV file fits in memory, and reading a random sample of its rows when it does not.

Reading a file whole holds its bytes, its text, pandas' copy and one Python string per cell
(about 60 bytes for a 9-character cell): measured at 12x the file's size on the 1M-row,
20-column benchmark file (bench/train_scale.py). A file whose reading would not fit is
refused before it is read, naming the limit and the ways out, rather than the machine
killing the process.
"""

from __future__ import annotations

import codecs
import csv
import io
import os
import random
from pathlib import Path

from training.errors import CsvError, ParameterError

#: Peak memory of reading a file (and typing its columns), in multiples of its size.
READ_FACTOR = 12
GB = 1024**3


def available_memory() -> int:
    """Bytes this process can still take: ``MemAvailable`` on Linux, else physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(path: Path, memory_limit: int | None = None) -> None:
    """Refuse ``path`` if reading it whole needs more than ``memory_limit`` bytes
    (default: the memory available now)."""
    limit = available_memory() if memory_limit is None else memory_limit
    size = path.stat().st_size
    need = size * READ_FACTOR
    if need <= limit:
        return
    rows = max(1_000, int(limit / READ_FACTOR / max(size, 1) * _rough_rows(path) * 0.8))
    source = "the memory available now" if memory_limit is None else "memory_limit"
    raise CsvError(
        path,
        f"is {_size(size)}; reading it needs about {_size(need)} of memory, more than the "
        f"{_size(limit)} limit ({source}). Train on a random sample "
        f"of its rows with --sample-rows N (about {rows:,} fit), or read it on a larger "
        "machine and run the experts' fits on a Dask cluster with --scheduler ADDRESS",
    )


def _size(n: float) -> str:
    return f"{n / GB:.1f} GB" if n >= GB / 10 else f"{n / 1024**2:.1f} MB"


def _rough_rows(path: Path) -> int:
    """The file's rows, estimated from its first megabyte."""
    with path.open("rb") as fh:
        head = fh.read(1 << 20)
    lines = max(head.count(b"\n"), 1)
    return max(1, int(path.stat().st_size / len(head) * lines)) if head else 1


def check_sample_rows(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParameterError("--sample-rows", value, "must be a positive number of rows")
    return value


def sample_text(
    path: Path, n_rows: int, seed: int = 0, encoding: str | None = None
) -> tuple[bytes, list[int]]:
    """The header and a uniform random sample of ``n_rows`` data rows, as UTF-8 CSV bytes,
    and the 0-based data row of each (in file order). One pass; memory holds the sample."""
    with path.open("rb") as fh:
        start = fh.read(4)
    if encoding is None and start.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    rng = random.Random(seed)
    kept: list[tuple[int, list[str]]] = []
    with path.open(encoding=encoding or "utf-8-sig", newline="") as fh:
        head = fh.read(64 * 1024)
        fh.seek(0)
        from training.csvfile import sniff_delimiter

        delimiter = sniff_delimiter(head.lstrip("\ufeff"))
        reader = csv.reader(fh, delimiter=delimiter)
        try:
            header = next(reader, None)
            number = 0
            for row in reader:
                if not row:
                    continue
                # Reservoir sampling (Algorithm R): every row is kept with n_rows/number odds.
                if number < n_rows:
                    kept.append((number, row))
                else:
                    j = rng.randrange(number + 1)
                    if j < n_rows:
                        kept[j] = (number, row)
                number += 1
        except UnicodeDecodeError as exc:
            wanted = encoding or "utf-8"
            raise CsvError(path, f"is not {wanted} text: {exc}; check --encoding") from None
        except csv.Error as exc:
            raise CsvError(path, f"is not a readable CSV: {exc}") from None
    if header is None:
        raise CsvError(path, "is empty")
    kept.sort(key=lambda item: item[0])
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(row for _, row in kept)
    return out.getvalue().encode("utf-8"), [number for number, _ in kept]
