"""A single row's answer (one ``%`` into a format) is the same text as the strided path
that renders many rows, whatever the rows' labels."""

from __future__ import annotations

import json

import numpy as np

from app.codecs.rows import LABEL, NUMBER, RowTemplate


def template(classes: list[str]) -> RowTemplate:
    # {"label":L,"p":{"a%":N,"b":N},"experts":{"e0":E0,"e1":E1},"w":N},  -- a % in a key too
    kinds = (LABEL, NUMBER, NUMBER, 0, 1, NUMBER)
    fragments = (b'{"label":', b',"p":{"a%":', b',"b":', b'},"experts":{"e0":', b',"e1":',
                 b'},"w":', b"},")  # fmt: skip
    tokens = np.array([json.dumps(c).encode() for c in classes], dtype=object)
    return RowTemplate(kinds, fragments, tokens)


def test_one_row_renders_as_a_row_of_many() -> None:
    t = template(["no", "yes %s"])
    rng = np.random.default_rng(0)
    numbers = rng.random((3, 3))
    numbers[1, 0] = 1e-300  # orjson's exponent form
    mixture = np.array([1, 0, 1])
    experts = np.array([[0, 1], [1, 1], [1, 0]])
    many = t.render(numbers, (mixture, experts))
    one = slice(0, 1)
    ones = [t.render(numbers[i:][one], (mixture[i:][one], experts[i:][one])) for i in range(3)]
    assert b",".join(ones) == many
    rows = json.loads(b"[" + many + b"]")
    assert rows[0]["label"] == "yes %s" and rows[2]["experts"] == {"e0": "yes %s", "e1": "no"}
    assert rows[1]["p"]["a%"] == 1e-300


def test_every_combination_of_labels_renders_its_own_text() -> None:
    """Labels are merged with the text around them, one text per combination of classes
    (two adjacent labels of three classes: nine): each row must get its own."""
    classes = ["a", "b,c", 'd"']
    t = template(classes)
    rng = np.random.default_rng(1)
    n = 60
    numbers = rng.random((n, 3))
    mixture = rng.integers(0, 3, n)
    experts = rng.integers(0, 3, (n, 2))
    many = t.render(numbers, (mixture, experts))
    ones = [
        t.render(numbers[i : i + 1], (mixture[i : i + 1], experts[i : i + 1])) for i in range(n)
    ]
    assert b",".join(ones) == many
    rows = json.loads(b"[" + many + b"]")
    assert [r["label"] for r in rows] == [classes[c] for c in mixture]
    assert [[r["experts"]["e0"], r["experts"]["e1"]] for r in rows] == [
        [classes[a], classes[b]] for a, b in experts
    ]
