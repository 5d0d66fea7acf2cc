"""The per-instance JSON answer, rendered from arrays with one template per bundle.

A row of the answer always has the same shape for a given bundle and ``include``: fixed
text (keys, expert names, class names, constants) between numbers and labels. The
template holds that text once; :meth:`RowTemplate.render` formats every number of the
batch in a single orjson call and interleaves, so building a 1000-row answer costs
array operations, not a million small Python objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import orjson

from app.bundle.mixture import INTERVAL

if TYPE_CHECKING:
    from app.runtime import LoadedModel

UNCERTAINTY = ("total", "aleatoric", "epistemic", "selection")
NUMBER, LABEL = -1, -2  # slot kinds; an expert's label slot holds the expert's index
_FEW_ROWS = 4


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
    fragments: np.ndarray  # (S + 1,) object: the text around the S slots
    number_slots: np.ndarray  # slot positions of the numbers, in the block's order
    label_slot: int | None  # slot position of the mixture's label
    expert_label_slots: np.ndarray  # slot position of expert j's label
    label_tokens: np.ndarray  # object: each class label as JSON
    slot_kinds: tuple[int, ...] = ()  # per slot: NUMBER, LABEL, or an expert's index
    fragment_list: tuple[bytes, ...] = ()  # the fragments as plain bytes

    def render(
        self, numbers: np.ndarray, labels: tuple[np.ndarray, np.ndarray | None] | None
    ) -> bytes:
        """The rows, comma-separated: ``numbers`` is (n, K) in slot order."""
        n, k = numbers.shape
        if n <= _FEW_ROWS:
            return self._render_few(numbers, labels)
        tokens = np.empty((n, len(self.fragments) - 1), dtype=object)
        if k:
            raw = orjson.dumps(numbers, option=orjson.OPT_SERIALIZE_NUMPY)
            flat = raw[2:-2].replace(b"],[", b",").split(b",")
            tokens[:, self.number_slots] = np.array(flat, dtype=object).reshape(n, k)
        if labels is not None:
            mixture, experts = labels
            if self.label_slot is not None:
                tokens[:, self.label_slot] = self.label_tokens[mixture]
            if len(self.expert_label_slots) and experts is not None:
                tokens[:, self.expert_label_slots] = self.label_tokens[experts]
        full = np.empty((n, 2 * tokens.shape[1] + 1), dtype=object)
        full[:, 0::2] = self.fragments
        full[:, 1::2] = tokens
        return b"".join(full.ravel().tolist())[:-1]  # every row ends with "},"

    def _render_few(
        self, numbers: np.ndarray, labels: tuple[np.ndarray, np.ndarray | None] | None
    ) -> bytes:
        """The same rows in plain Python: numpy's per-call cost dominates a row or two."""
        kinds = self.slot_kinds
        fragments = self.fragment_list
        tokens = self.label_tokens
        raw = orjson.dumps(numbers, option=orjson.OPT_SERIALIZE_NUMPY)
        flat = iter(raw[2:-2].replace(b"],[", b",").split(b",")) if numbers.shape[1] else iter(())
        mixture = labels[0].tolist() if labels is not None else None
        experts = labels[1].tolist() if labels is not None and labels[1] is not None else None
        parts: list[bytes] = []
        for i in range(numbers.shape[0]):
            parts.append(fragments[0])
            for slot, kind in enumerate(kinds):
                if kind == NUMBER:
                    parts.append(next(flat))
                elif kind == LABEL:
                    parts.append(tokens[mixture[i]])  # type: ignore[index]
                else:
                    parts.append(tokens[experts[i][kind]])  # type: ignore[index]
                parts.append(fragments[slot + 1])
        return b"".join(parts)[:-1]


def row_template(model: LoadedModel, include: Sequence[str]) -> RowTemplate:
    """The template of one answer row for ``model`` with the parts in ``include``."""
    b = _Builder()
    label_at: int | None = None
    expert_labels: list[int] = []
    classification = model.task == "classification"
    parts = [p for p in ("prediction", "weights", "experts", "uncertainty") if p in include]
    b.text(b"{")
    for i, part in enumerate(parts):
        b.text((b"," if i else b"") + _json(part) + b":")
        if part == "prediction" and classification:
            b.text(b'{"label":')
            label_at = len(b.slots)
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
                    expert_labels.append(len(b.slots))
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
    kinds = np.array(b.slots)
    fragments = np.empty(len(b.fragments), dtype=object)
    fragments[:] = b.fragments
    tokens = np.empty(len(model.classes), dtype=object)
    tokens[:] = [_json(c) for c in model.classes]
    return RowTemplate(
        fragments=fragments,
        number_slots=np.flatnonzero(kinds == NUMBER),
        label_slot=label_at,
        expert_label_slots=np.asarray(expert_labels, dtype=np.int64),
        label_tokens=tokens,
        slot_kinds=tuple(b.slots),
        fragment_list=tuple(b.fragments),
    )
