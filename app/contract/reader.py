"""Reading a JSON answer into the contract's dataclasses, by their type hints.

Only the fields the contract promises are read and any others are ignored, so a newer
server that adds a field does not break an older client. A part that ``include`` left
out, or an absent optional field, is ``None``. A ``Sequence`` (a column) is kept as the
list sent; a ``tuple`` is read item by item. Each type's reader is built once from its
hints, so reading costs about what a hand-written parser does.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any, Literal, TypeVar, Union, cast, get_args, get_origin

from app.contract.schema import hints, wire_fields

T = TypeVar("T")
Reader = Callable[[Any], Any]


class Unreadable(ValueError):
    """A value that is not what the contract says; the message names where."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []


def read(cls: type[T], raw: Any, where: str = "the answer") -> T:
    """``raw`` (parsed JSON) as an instance of the dataclass ``cls``."""
    reader: Reader = _reader(cast(Any, cls))
    try:
        return reader(raw)
    except Unreadable as exc:
        at = "".join(exc.path)
        raise Unreadable(
            f"{where}{at}: {exc.problem}" if at else f"{where}: {exc.problem}"
        ) from None


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


@cache
def _reader(hint: Any) -> Reader:
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _reader(options[0])
        if all(dataclasses.is_dataclass(o) for o in options):
            return _one_of(tuple(options))
        return _as_sent  # a label: int or str, as sent
    if origin is Literal or hint is Any:
        return _as_sent
    if origin is Sequence:
        return _column
    if origin is tuple:
        item = _reader(args[0])
        return lambda raw: tuple(map(item, raw))
    if origin is not None and issubclass(origin, Mapping):
        value = _reader(args[1])
        return lambda raw: {str(k): value(v) for k, v in raw.items()}
    if dataclasses.is_dataclass(hint):
        return _object(hint)  # type: ignore[arg-type]
    if hint is datetime:
        return datetime.fromisoformat
    return hint


def _as_sent(raw: Any) -> Any:
    return raw


def _column(raw: Any) -> Any:
    """A column (``Sequence`` in the contract): the list as sent, not copied item by item,
    since a columnar answer may hold millions of numbers."""
    if not isinstance(raw, list):
        raise Unreadable(f"expected an array, got {type(raw).__name__}")
    return raw


def _object(cls: type) -> Reader:
    plan = []
    for f in wire_fields(cls):
        names = f.metadata.get("json", f.name)
        plan.append(
            (f.name, (names,) if isinstance(names, str) else names, _required(f),
             _reader(hints(cls)[f.name]))
        )  # fmt: skip

    def read_object(raw: Any) -> Any:
        if type(raw) is not dict and not isinstance(raw, Mapping):
            raise Unreadable(f"expected an object, got {type(raw).__name__}")
        values: dict[str, Any] = {}
        for name, names, required, convert in plan:
            key = names[0] if names[0] in raw else next((n for n in names if n in raw), None)
            if key is None and required:
                raise Unreadable(f"lacks {name!r}")
            value = None if key is None else raw[key]
            try:
                values[name] = None if value is None else convert(value)
            except Unreadable as exc:
                exc.path.insert(0, f".{key}")
                raise
            except (TypeError, ValueError, AttributeError) as exc:
                raise Unreadable(f"{key}: {exc}") from None
        return cls(**values)

    return read_object


def _one_of(options: tuple[type, ...]) -> Reader:
    """The first option whose required fields are all present (a label, or a mean)."""
    keyed = [
        (frozenset(f.name for f in wire_fields(o) if _required(f)), _reader(o)) for o in options
    ]
    names = ", ".join(o.__name__ for o in options)

    def read_one(raw: Any) -> Any:
        if type(raw) is dict or isinstance(raw, Mapping):
            for required, reader in keyed:
                if required <= raw.keys():
                    return reader(raw)
        raise Unreadable(f"is none of {names}")

    return read_one
