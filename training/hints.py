"""Hints about a user's columns that the data alone cannot settle: shown, never acted on.

A numeric column spoilt by stand-in values ("?", "unknown") or written with units, a
column of dates read as categories, or an identifier, still trains; the user should hear
about it rather than find it in the manifest.
"""

from __future__ import annotations

import re
import shlex
import warnings
from collections import Counter
from collections.abc import Iterable

import numpy as np
import pandas as pd

from app.bundle.normalise import json_repr, loose
from training.errors import DataWarning

# Units, currency signs and thousands spaces around a number ("82.1%", "37 684,73 €").
_DECORATION = re.compile(r"[\s\u00a0\u202f'%‰€$£¥]")
_DASHES = frozenset({"-", "\u2013", "\u2014"})
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


def _decorated_number(text: str) -> bool:
    """Whether ``text`` is a number once units, currency signs and separators are gone, or
    an accounting export's negative in parentheses ("(1 250.00)")."""
    bare = _DECORATION.sub("", text)
    if len(bare) > 2 and bare[0] == "(" and bare[-1] == ")":
        bare = bare[1:-1]
    if bare.count(",") == 1 and "." not in bare:
        bare = bare.replace(",", ".")  # a decimal comma
    else:
        bare = bare.replace(",", "")  # thousands commas
    return bool(_PLAIN_NUMBER.fullmatch(bare))


def warn_mostly_numeric(name: str, n_numbers: int, odd: Counter) -> None:
    """A numeric column spoilt by a few stand-in strings ("?", "unknown"), or written with
    units and separators ("82.1%", "37 684,73"), is common. Either way the column becomes
    categorical, which the user should hear about rather than find in the manifest."""
    n_odd = sum(odd.values())
    decorated = Counter({t: n for t, n in odd.items() if _decorated_number(t)})
    n_decorated = sum(decorated.values())
    # An accounting export writes zero as a lone dash.
    n_dash = sum(n for t, n in odd.items() if t in _DASHES)
    if n_decorated and n_numbers + n_decorated + n_dash >= 0.9 * (n_numbers + n_odd):
        shown = ", ".join(repr(t) for t, _ in decorated.most_common(3))
        dashes = f", and {n_dash} cells of a lone dash (0 in an accounting export)" * bool(n_dash)
        warnings.warn(
            f"column {name!r} holds numbers written as text in {n_decorated} cells (e.g. "
            f"{shown}){dashes}; it is treated as categorical. To use it as a number, write "
            "plain numbers in the file (no units, currency signs, points or commas between "
            "thousands, parentheses for negatives or dashes for zero; one decimal mark; "
            "digits grouped in threes by spaces are read)",
            DataWarning,
            stacklevel=4,
        )
        return
    # A few texts among mostly numbers (stand-ins for 'missing' or 'infinite'): said
    # whenever the numbers are the more, since each distinct number becomes a category.
    if len(odd) > 3 or n_numbers <= n_odd:
        return
    shown = ", ".join(repr(t) for t, _ in odd.most_common())
    warnings.warn(
        f"column {name!r} is numeric except for {n_odd} cells holding {shown}; it is "
        "treated as categorical. If those mean 'missing', pass them as na_values "
        f"({na_values_option(t for t, _ in odd.most_common())} on the command line)",
        DataWarning,
        stacklevel=4,
    )


def na_values_option(texts: Iterable[str]) -> str:
    """``--na-values`` as a shell takes it: a text that starts with ``-`` needs the ``=``
    form, or it reads as another option."""
    texts = list(texts)
    plain = [shlex.quote(t) for t in texts if not t.startswith("-")]
    dashed = [f"--na-values={shlex.quote(t)}" for t in texts if t.startswith("-")]
    return " ".join(([f"--na-values {' '.join(plain)}"] if plain else []) + dashed)


# Dates as spreadsheets and databases write them: ISO (with a time), or day and month in
# either order with a year; with points or dashes only a four-digit year, as "1.2.10" is
# more likely a version.
_DATE = re.compile(
    r"\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|(?:\d{1,2}/\d{1,2}/(?:\d{4}|\d{2})|\d{1,2}([.-])\d{1,2}\1\d{4})"
    r"(?: \d{1,2}:\d{2}(?::\d{2})?)?",
    re.ASCII,
)
_MIN_DATES = 10  # a handful of distinct dates may well be categories (release days, say)


def warn_dates(name: str, counts: Counter) -> None:
    """A categorical column of dates: each date is a category of its own, so the models can
    neither order dates nor read one they have not seen."""
    dates = [t for t in counts if _DATE.fullmatch(t)]
    if len(dates) < _MIN_DATES or sum(counts[t] for t in dates) < 0.9 * sum(counts.values()):
        return
    warnings.warn(
        f"column {name!r} looks like dates (e.g. {dates[0]!r}); it is read as "
        f"{len(counts)} categories, so the models cannot tell an earlier date from a later "
        "one nor read a date they have not seen. Turn it into numbers (a year, a month, "
        "days since an event) or drop it (--drop)",
        DataWarning,
        stacklevel=4,
    )


_MIN_ID_ROWS = 50


def warn_identifier(where: str, name: str, col: pd.Series) -> None:
    """A column that differs in every row, as an identifier or a row number does: nothing
    in it repeats, so a model can only learn the numbering (or nothing at all)."""
    n = len(col)
    if n < _MIN_ID_ROWS or col.isna().any() or col.nunique() != n:
        return
    if isinstance(col.dtype, pd.CategoricalDtype):
        what = "a different value in every row, like an identifier or free text"
    else:
        values = col.to_numpy(dtype=np.float64)
        if not np.all(values == np.round(values)):
            return  # measurements with decimals are distinct often enough
        steps = np.diff(values)
        # Counting up (or down) by one, but for the rows dropped on the way: a file merely
        # sorted by a distinct whole-number feature steps unevenly.
        if not (np.all(steps > 0) or np.all(steps < 0)) or np.median(np.abs(steps)) != 1:
            return
        what = "a different whole number in every row, in order, like a row number or an identifier"
    warnings.warn(
        f"{where}: column {name!r} holds {what}; if it is one, drop it (--drop): the "
        "models would learn from the numbering, or from values no later row will have",
        DataWarning,
        stacklevel=3,
    )


def warn_lookalikes(what: str, values: Iterable[str]) -> None:
    """Values that differ only in case, spacing or Unicode form (``yes`` and ``Yes``,
    ``Zürich`` composed and decomposed) are different categories, or classes, to the
    models, and look alike in any report; the user should hear about it."""
    groups: dict[str, list[str]] = {}
    for v in values:
        groups.setdefault(loose(v), []).append(v)
    alike = [g for g in groups.values() if len(g) > 1]
    if not alike:
        return
    shown = "; ".join(" / ".join(json_repr(v) for v in sorted(g)) for g in alike[:3])
    more = f" and {len(alike) - 3} more groups" if len(alike) > 3 else ""
    warnings.warn(
        f"{what}: values that differ only in case, spaces or Unicode form are kept apart: "
        f"{shown}{more}; make them one in the file if they mean the same",
        DataWarning,
        stacklevel=3,
    )
