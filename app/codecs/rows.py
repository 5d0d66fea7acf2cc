"""The per-instance JSON answer, rendered from arrays with one template per bundle and
``include``: the fixed text once, every number of a batch in one orjson call
(docs/design.md, "Writing an answer")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import orjson

from app.bundle.mixture import INTERVAL
from app.contract.answers import UNCERTAINTY
from app.contract.request import PARTS

if TYPE_CHECKING:
    from app.core.runtime import LoadedModel

NUMBER, LABEL = -1, -2  # slot kinds; an expert's label slot holds the expert's index
_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def _json(value: object) -> bytes:
    return orjson.dumps(value)


@dataclass
class _Builder:
    fragments: list[bytes] = field(default_factory=lambda: [b""])
    slots: list[int] = field(default_factory=list)

    def text(self, raw: bytes) -> None:
        self.fragments[-1] += raw

    def slot(self, kind: int) -> None:
        self.slots.append(kind)
        self.fragments.append(b"")

    def numbers(self, keys: Sequence[str]) -> None:
        """``{"k0":<n>,"k1":<n>}``."""
        self.text(b"{")
        for i, k in enumerate(keys):
            self.text((b"," if i else b"") + _json(k) + b":")
            self.slot(NUMBER)
        self.text(b"}")


@dataclass(frozen=True)
class RowTemplate:
    slot_kinds: tuple[int, ...]  # per slot: NUMBER, LABEL, or the index of an expert's label
    fragment_list: tuple[bytes, ...]  # the text around the slots: one more than slots
    # Each class label as JSON bytes, in an object array so a row's labels are one take.
    label_tokens: np.ndarray = field(compare=False)

    @cached_property
    def one_row(self) -> tuple[bytes, tuple[tuple[int, int], ...]]:
        """A single row's format (``%s`` per slot, without the trailing comma) and where
        its labels go among the numbers: (position, kind) per label slot."""
        fmt = b"%s".join(f.replace(b"%", b"%%") for f in self.fragment_list)[:-1]
        labels = tuple((i, kind) for i, kind in enumerate(self.slot_kinds) if kind != NUMBER)
        return fmt, labels

    def render_one(
        self, numbers: np.ndarray, labels: tuple[np.ndarray, np.ndarray | None] | None
    ) -> bytes:
        """:meth:`render` for one row: one ``%`` of the row's values into its format, where
        the strided assignments cost a Python step per slot (a single-row request's answer
        was 5% of a request's time on the event loop, measured)."""
        fmt, label_slots = self.one_row
        values = orjson.dumps(numbers.ravel(), option=_NUMPY)[1:-1].split(b",")
        if label_slots:
            assert labels is not None
            mixture, experts = labels
            tokens = self.label_tokens
            for position, kind in label_slots:
                if kind == LABEL:
                    values.insert(position, tokens[mixture[0]])
                else:
                    assert experts is not None
                    values.insert(position, tokens[experts[0, kind]])
        return fmt % tuple(values)

    def render(
        self, numbers: np.ndarray, labels: tuple[np.ndarray, np.ndarray | None] | None
    ) -> bytes:
        """The rows, comma-separated: ``numbers`` is (n, K) in slot order.

        Every piece of the answer goes into one list: the fixed text by repeating one row's
        list, the values by strided slice assignments, one per slot (C loops over the rows);
        it is joined once.
        """
        n, k = numbers.shape
        if n == 1 and k:
            return self.render_one(numbers, labels)
        kinds = self.slot_kinds
        width = 2 * len(kinds) + 1
        row: list[bytes] = [b""] * width
        row[0::2] = self.fragment_list
        parts = row * n
        if k:
            raw = orjson.dumps(np.ascontiguousarray(numbers).ravel(), option=_NUMPY)
            flat = raw[1:-1].split(b",")
            column = 0
            for slot, kind in enumerate(kinds):
                if kind == NUMBER:
                    parts[2 * slot + 1 :: width] = flat[column::k]
                    column += 1
        if labels is not None:
            mixture, experts = labels
            tokens = self.label_tokens
            for slot, kind in enumerate(kinds):
                if kind == LABEL:
                    parts[2 * slot + 1 :: width] = tokens[mixture].tolist()
                elif kind >= 0 and experts is not None:
                    parts[2 * slot + 1 :: width] = tokens[experts[:, kind]].tolist()
        return b"".join(parts)[:-1]  # every row ends with "},"


def row_template(model: LoadedModel, include: Sequence[str]) -> RowTemplate:
    """The template of one answer row for ``model`` with the parts in ``include``."""
    b = _Builder()
    classification = model.task == "classification"
    parts = [p for p in PARTS if p in include]
    b.text(b"{")
    for i, part in enumerate(parts):
        b.text((b"," if i else b"") + _json(part) + b":")
        if part == "prediction" and classification:
            b.text(b'{"label":')
            b.slot(LABEL)
            b.text(b',"probabilities":')
            b.numbers(model.class_keys)
            b.text(b"}")
        elif part == "prediction":
            b.text(b'{"mean":')
            b.slot(NUMBER)
            b.text(b',"std":')
            b.slot(NUMBER)
            b.text(b',"interval":{"level":' + _json(INTERVAL) + b',"lower":')
            b.slot(NUMBER)
            b.text(b',"upper":')
            b.slot(NUMBER)
            b.text(b"}}")
        elif part == "weights":
            b.numbers(model.experts)
        elif part == "experts":
            b.text(b"{")
            for j, name in enumerate(model.experts):
                b.text((b"," if j else b"") + _json(name) + b":")
                if classification:
                    b.text(b'{"label":')
                    b.slot(j)
                    b.text(b',"probabilities":')
                    b.numbers(model.class_keys)
                    b.text(b"}")
                else:
                    b.text(b'{"mean":')
                    b.slot(NUMBER)
                    b.text(b',"std":' + _json(model.expert_std[j]) + b"}")
            b.text(b"}")
        else:
            b.numbers(UNCERTAINTY)
    b.text(b"},")
    return RowTemplate(
        slot_kinds=tuple(b.slots),
        fragment_list=tuple(b.fragments),
        label_tokens=np.array([_json(c) for c in model.classes], dtype=object),
    )
