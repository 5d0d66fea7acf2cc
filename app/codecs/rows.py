"""The per-instance JSON answer, rendered from arrays with one template per bundle and
``include``: the fixed text once, every number of a batch in one orjson call
(docs/design.md, "Writing an answer")."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import orjson

from app.bundle.digits import significant
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

    @cached_property
    def cells(self) -> _Cells:
        """The row as one cell per number, and around them the fixed text with the labels
        merged into it (:class:`_Cells`)."""
        return _Cells.of(self.slot_kinds, self.fragment_list, list(self.label_tokens))

    def render(
        self,
        numbers: np.ndarray,
        labels: tuple[np.ndarray, np.ndarray | None] | None,
        head: bytes = b"",
        tail: bytes = b"",
    ) -> bytes:
        """``head``, the rows comma-separated, ``tail``: ``numbers`` is (n, K) in slot order.

        Every piece of the answer goes into one list: the fixed text by repeating one row's
        list, the numbers and the labelled text by strided slice assignments, one per cell
        (C loops over the rows); it is joined once, with ``head`` and ``tail``, so that the
        answer is copied once (each ``+`` of a 1000-row answer copied all of it).
        """
        n, k = numbers.shape
        if n == 1 and k:
            return head + self.render_one(numbers, labels) + tail
        cells = self.cells
        width = 2 * k + 1
        parts = cells.row * n
        if k:
            raw = orjson.dumps(np.ascontiguousarray(numbers).ravel(), option=_NUMPY)
            flat = raw[1:-1].split(b",")
            for column in range(k):
                parts[2 * column + 1 :: width] = flat[column::k]
        if cells.labelled:
            assert labels is not None
            mixture, experts = labels
            tokens = len(self.label_tokens)
            for at, kinds, texts in cells.labelled:
                which = np.zeros(n, dtype=np.intp)
                for kind in kinds:
                    if kind == LABEL:
                        which = which * tokens + mixture
                    else:
                        assert experts is not None
                        which = which * tokens + experts[:, kind]
                parts[at::width] = texts[which].tolist()
        parts[0] = head + parts[0]
        parts[-1] = parts[-1][:-1] + tail  # every row ends with "},"
        return b"".join(parts)


# At most this many texts for a run of labels between two numbers (classes ** labels).
MAX_VARIANTS = 1024


@dataclass(frozen=True)
class _Cells:
    """One row's pieces for :meth:`RowTemplate.render`: ``row`` holds the fixed text at
    even places (a piece per stretch between numbers) and a place for each number at odd
    ones; ``labelled`` replaces the stretches that hold labels, per row, with the text for
    that row's labels, one text per combination of classes (place, label kinds, texts).

    A label merged with the text around it is one piece where it was three: the 1000-row
    demo answer joins 43,000 pieces instead of 55,000 (render 2.66 -> 2.53 ms in process).
    """

    row: list[bytes]
    labelled: tuple[tuple[int, tuple[int, ...], np.ndarray], ...]

    @classmethod
    def of(
        cls, kinds: tuple[int, ...], fragments: tuple[bytes, ...], tokens: list[bytes]
    ) -> _Cells:
        classes = len(tokens)
        # Each stretch between numbers: its text and labels in order, [t0, L1, t1, ...].
        stretches: list[list[bytes | int]] = [[fragments[0]]]
        for slot, kind in enumerate(kinds):
            if kind == NUMBER:
                stretches.append([])
            else:
                stretches[-1].append(kind)
            stretches[-1].append(fragments[slot + 1])
        row: list[bytes] = []
        labelled = []
        for at, stretch in enumerate(stretches):
            if at:
                row.append(b"")  # the number before this stretch
            row.append(b"")
            labels = [x for x in stretch if isinstance(x, int)]
            if not labels:
                row[-1] = b"".join(x for x in stretch if isinstance(x, bytes))
                continue
            if classes ** len(labels) > MAX_VARIANTS:
                raise ValueError(f"{len(labels)} labels of {classes} classes between two numbers")
            texts = np.empty(classes ** len(labels), dtype=object)
            # In the order of the index render takes: the last label's class fastest.
            for i, chosen in enumerate(itertools.product(tokens, repeat=len(labels))):
                picks = iter(chosen)
                texts[i] = b"".join(x if isinstance(x, bytes) else next(picks) for x in stretch)
            labelled.append((2 * at, tuple(labels), texts))
        return cls(row, tuple(labelled))


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
                elif model.per_row_sds:  # each row's own sd, after its mean
                    b.text(b'{"mean":')
                    b.slot(NUMBER)
                    b.text(b',"std":')
                    b.slot(NUMBER)
                    b.text(b"}")
                else:
                    b.text(b'{"mean":')
                    b.slot(NUMBER)
                    std = significant(np.array(model.expert_std[j])).item()
                    b.text(b',"std":' + _json(std) + b"}")
            b.text(b"}")
        else:
            b.numbers(UNCERTAINTY)
    b.text(b"},")
    return RowTemplate(
        slot_kinds=tuple(b.slots),
        fragment_list=tuple(b.fragments),
        label_tokens=np.array([_json(c) for c in model.classes], dtype=object),
    )
