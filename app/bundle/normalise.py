"""The one rule that turns raw cell values into feature values, for training and serving.

A CSV cell read by ``iabma train`` and the same value sent as JSON go through these
functions, with the settings the manifest records (:class:`~app.bundle.manifest.InputRule`):
whitespace, missing-value strings, numbers written as text, categories. The rules in
full: docs/design.md, "Bundle normalisation".
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

# pandas.read_csv's default missing-value strings (pandas._libs.parsers.STR_NA_VALUES);
# the serving side has no pandas, and a test keeps this copy equal to pandas' own.
PANDAS_NA_VALUES: tuple[str, ...] = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
    "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)  # fmt: skip
OTHER_CATEGORY = "__other__"
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_MINUS = "\u2212"
_GROUPED = re.compile(
    r"[+-]?[1-9]\d{0,2}(?P<sep>[ \u00a0\u202f'])\d{3}(?:(?P=sep)\d{3})*(?P<frac>[.,]\d+)?", re.ASCII
)

Problem = tuple[str, str]  # (error code, message), before the field is known
Decimal = Literal[".", ","]


def json_repr(value: object) -> str:
    """A value as a client would recognise it in an error message."""
    if isinstance(value, str):
        return quoted(value[:40]) + ("..." if len(value) > 40 else "")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        text = repr(value)
        return text if len(text) <= 40 else f"{text[:40]}... ({len(text)} characters)"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


# What prints as nothing: format characters (a byte-order mark, a zero-width space),
# controls, line and paragraph separators; and emoji variation selectors.
_HIDDEN = frozenset({"Cf", "Cc", "Co", "Cn", "Zl", "Zp"})


def _hidden(ch: str) -> bool:
    return unicodedata.category(ch) in _HIDDEN or 0xFE00 <= ord(ch) <= 0xFE0F


def visible(text: str) -> str:
    """``text`` with what prints as nothing, or as a plain space, escaped as ``\\u`` and
    its hex code point; in text not in NFC form, combining marks too, so that two forms of
    one word differ on screen (``"Zu\\u0308rich"`` beside ``"Zürich"``)."""
    marks = not unicodedata.is_normalized("NFC", text)
    out = []
    for ch in text:
        if ch != " " and (ch.isspace() or _hidden(ch) or (marks and unicodedata.combining(ch))):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "".join(out)


def quoted(text: str) -> str:
    """``text`` in double quotes as JSON writes a string: a quote or backslash in it
    escaped, so that a category ``"q"`` shows as ``"\\"q\\""``, then :func:`visible`."""
    return '"' + visible(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


def loose(text: str) -> str:
    """Text as it looks: NFKC (a no-break space reads as a space, composed and decomposed
    letters alike), with nothing that prints as nothing, runs of spaces as one, no
    surrounding spaces, in any case."""
    shown = "".join(ch for ch in unicodedata.normalize("NFKC", text) if not _hidden(ch))
    return " ".join(shown.split()).casefold()


def _unaccented(text: str) -> str:
    return "".join(
        ch for ch in unicodedata.normalize("NFKD", loose(text)) if not unicodedata.combining(ch)
    )


@dataclass(frozen=True)
class Normaliser:
    """Reads text cells: whitespace, missing-value strings, numbers written as text."""

    na_values: frozenset[str] = frozenset(PANDAS_NA_VALUES)
    strip_whitespace: bool = True
    na_casefold: bool = False
    numbers_as_text: bool = True
    decimal: Decimal = "."  # "," for files written with decimal commas ("3,5")
    _folded: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_folded", frozenset(v.casefold() for v in self.na_values))

    def text(self, value: str) -> str | None:
        """Normalised text, or None when it spells a missing value."""
        t = value.strip() if self.strip_whitespace else value
        if t in self.na_values or (self.na_casefold and t.casefold() in self._folded):
            return None
        return t

    def number_text(self, text: str) -> float | None:
        """The number ``text`` spells (already normalised), or None if it spells none."""
        if not self.numbers_as_text:
            return None
        if text.startswith(_MINUS):
            text = "-" + text[1:]  # typeset reports write the minus sign itself
        grouped = _GROUPED.fullmatch(text)
        if grouped is not None:
            frac = grouped["frac"]
            if frac is not None and frac[0] != self.decimal:
                return None  # "1 234.5" in a file written with decimal commas
            text = text.replace(grouped["sep"], "")
        if self.decimal == ",":
            if "." in text:  # "1.5" in a file with decimal commas is not guessed at
                return None
            text = text.replace(",", ".", 1)
        return float(text) if _NUMBER.fullmatch(text) else None

    def is_missing(self, value: object) -> bool:
        if value is None:
            return True
        if isinstance(value, float):
            return math.isnan(value)
        return isinstance(value, str) and self.text(value) is None

    def number(self, value: object) -> tuple[float | None, Problem | None]:
        """A numeric feature's value: a number, numeric text, or missing."""
        if value is None:
            return None, None
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            return None, ("wrong_type", f"expected a number or null, got {json_repr(value)}")
        if isinstance(value, str):
            text = self.text(value)
            if text is None:
                return None, None
            number = self.number_text(text)
            if number is None:
                return None, ("wrong_type", f"expected a number or null, got {json_repr(value)}")
            return number, None
        try:
            return float(value), None
        except OverflowError:
            return math.inf, None


@dataclass(frozen=True)
class CategoryMap:
    """Raw values of one categorical feature to its categories (or the ``__other__`` bucket)."""

    categories: tuple[str, ...]
    rule: Normaliser
    other: bool = False  # values beyond the training-time cap share one bucket
    _known: frozenset[str] = field(init=False, repr=False, compare=False)
    _by_value: dict[float, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_known", frozenset(self.categories))
        by_value: dict[float, str | None] = {}
        for c in self.categories:
            if _NUMBER.fullmatch(c):
                # Two categories with one value ("1.5", "1.50") make a number ambiguous.
                number = float(c)
                by_value[number] = None if number in by_value else c
        object.__setattr__(self, "_by_value", {k: v for k, v in by_value.items() if v is not None})

    def shown(self, limit: int = 20) -> str:
        head = ", ".join(quoted(c) for c in self.categories[:limit])
        more = len(self.categories) - limit
        return f"[{head}{f', ... {more} more' if more > 0 else ''}]"

    def near(self, value: object) -> str | None:
        """The category that looks like ``value`` (another case, Unicode form or spacing),
        or else the one it spells without accents (``Kyoto`` for ``Kyōto``)."""
        if not isinstance(value, str):
            return None
        looks = self.__dict__.get("_looks")
        if looks is None:  # built on the first miss: hits never need them
            looks = (
                {loose(c): c for c in self.categories},
                {_unaccented(c): c for c in self.categories},
            )
            object.__setattr__(self, "_looks", looks)
        found: str | None = looks[0].get(loose(value)) or looks[1].get(_unaccented(value))
        return found

    def _unseen(self, value: object) -> tuple[str | None, Problem | None]:
        if self.other:
            return OTHER_CATEGORY, None
        near = self.near(value)
        hint = (
            f"; did you mean {json_repr(near)}? categories match exactly, case, accents and "
            "Unicode form included"
            if near is not None
            else ""
        )
        return None, (
            "unknown_category",
            f"unknown category {json_repr(value)}{hint}; known: {self.shown()} "
            "(send null for a missing value)",
        )

    def lookup(self, value: object) -> tuple[str | None, Problem | None]:
        """The category ``value`` means, None for missing, or the problem with it."""
        if value is None:
            return None, None
        if isinstance(value, str):
            if value in self._known:
                return value, None
            text = self.rule.text(value)
            if text is None:
                return None, None
            return (text, None) if text in self._known else self._unseen(value)
        if isinstance(value, bool):
            for spelt in (str(value), str(value).lower(), str(value).upper()):
                if spelt in self._known:
                    return spelt, None
            return self._unseen(value)
        if isinstance(value, (int, float)):
            if isinstance(value, float) and math.isnan(value):
                return None, None
            text = str(value)
            if text in self._known:
                return text, None
            try:
                match = self._by_value.get(float(value))
            except OverflowError:
                match = None
            return (match, None) if match is not None else self._unseen(value)
        return None, ("wrong_type", f"expected a string or null, got {json_repr(value)}")

    def lookup_all(self, values: Iterable[object]) -> tuple[list[str | None], int]:
        """Training-side: every value of a column, an unseen one as missing; and their count."""
        out: list[str | None] = []
        unseen = 0
        for v in values:
            cat, problem = self.lookup(v)
            if problem is not None:
                unseen += 1
            out.append(cat)
        return out, unseen


def rule_for(
    na_values: Sequence[str] | None = None,
    keep_default_na: bool = True,
    strip_whitespace: bool = True,
    na_casefold: bool = False,
    numbers_as_text: bool = True,
    decimal: Decimal = ".",
) -> Normaliser:
    """The rule for user options, following ``pandas.read_csv``'s ``na_values`` semantics."""
    if decimal not in (".", ","):
        raise ValueError(f"decimal must be '.' or ',', got {decimal!r}")
    na = set(PANDAS_NA_VALUES) if keep_default_na else set()
    na.update(na_values or ())
    return Normaliser(frozenset(na), strip_whitespace, na_casefold, numbers_as_text, decimal)
