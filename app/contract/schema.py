"""JSON Schemas (OpenAPI 3.1) generated from the contract's dataclasses.

Given a :class:`Vocabulary` (one bundle's name, task, experts and classes), the schemas
name experts and classes as properties and enums, fix the constants, and keep only the
prediction types of the bundle's task; without one they stay generic.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

Schema = dict[str, Any]
NULL: Schema = {"type": "null"}
_SCALARS: dict[Any, Schema] = {
    float: {"type": "number"},
    int: {"type": "integer"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
    datetime: {"type": "string", "format": "date-time"},
    Any: {},
}


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


@dataclass(frozen=True)
class Vocabulary:
    """What one bundle fixes in its answers."""

    name: str
    task: str
    experts: tuple[str, ...]
    classes: tuple[Any, ...]  # the labels as sent (numbers stay numbers)
    class_keys: tuple[str, ...]  # the labels as text: the probabilities' keys
    interval: float
    max_rows: int

    outputs: tuple[str, ...] = ()  # the OIP output tensors' names
    per_row_sds: bool = False  # regression experts' std: per row and expert, not per expert

    def keys(self, which: str) -> tuple[str, ...]:
        return self.experts if which == "experts" else self.class_keys

    def values(self, which: str) -> list[Any]:
        return list({"experts": self.experts, "outputs": self.outputs}.get(which, self.classes))

    def const(self, which: str) -> Any:
        if which in ("experts", "classes"):
            return self.values(which)
        return {"name": self.name, "task": self.task, "interval": self.interval}[which]

    def target(self) -> Schema:
        """An outcome: a class label as sent or as its text, or a number (or its text)."""
        if self.task == "classification":
            return {"enum": list(dict.fromkeys([*self.classes, *self.class_keys]))}
        return {"anyOf": [{"type": "number"}, {"type": "string"}]}


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def hints(cls: type) -> dict[str, Any]:
    """The type hints of a dataclass's fields, resolved once per class."""
    return _hints(cls)


def wire_fields(cls: type, task: str | None = None) -> list[dataclasses.Field[Any]]:
    """The fields on the wire; given ``task``, only those of that task (metadata ``task``)."""
    return [
        f
        for f in dataclasses.fields(cls)
        if f.metadata.get("wire", True) and (task is None or f.metadata.get("task", task) == task)
    ]


def is_array(hint: Any) -> bool:
    """A tuple (read item by item) or a Sequence (a column, read as sent)."""
    return get_origin(hint) in (tuple, Sequence)


def wire_name(f: dataclasses.Field[Any]) -> str:
    names = f.metadata.get("json", f.name)
    return names if isinstance(names, str) else names[0]


class Components:
    """Collects one component per dataclass reached, each under its class name."""

    def __init__(self, vocabulary: Vocabulary | None) -> None:
        self.vocabulary = vocabulary
        self.schemas: dict[str, Schema] = {}

    def of(self, cls: type) -> Schema:
        """A reference to ``cls``'s component, made on first use."""
        name = cls.__name__
        if name not in self.schemas:
            # Reserved first, so a field that refers back to the class stops here.
            self.schemas[name] = {}
            self.schemas[name] = self._object(cls)
        return ref(name)

    def _object(self, cls: type) -> Schema:
        props: dict[str, Schema] = {}
        required: list[str] = []
        task = self.vocabulary.task if self.vocabulary is not None else None
        for f in wire_fields(cls, task):
            name = wire_name(f)
            props[name] = self.field(f, hints(cls)[f.name])
            # "need": always sent for the bundle's task, though absent from the other's.
            needed = task is not None and f.metadata.get("need", False)
            if needed or (
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            ):
                required.append(name)
        out: Schema = {"type": "object", "properties": props}
        if not getattr(cls, "OPEN", False):  # an open class may gain fields unannounced
            out["additionalProperties"] = False
        if required:
            out["required"] = required
        if any(f.metadata.get("omit") and not f.metadata.get("need") for f in wire_fields(cls)):
            out["minProperties"] = 1
        if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
            out["description"] = " ".join(cls.__doc__.split())
        return out

    def field(self, f: dataclasses.Field[Any], hint: Any) -> Schema:
        meta: Mapping[str, Any] = f.metadata
        v = self.vocabulary
        if meta.get("omit"):
            hint = _without_none(hint)
        if v is not None and "per_row_shape" in meta:
            hint, meta = _per_row(hint, meta, v.per_row_sds)
        if v is not None and "const" in meta:
            out: Schema = {"const": v.const(meta["const"])}
        elif v is not None and meta.get("target"):
            out = v.target()
        else:
            out = self.type(hint, meta)
        if "doc" in meta:
            out = {**out, "description": meta["doc"]}
        if f.default is not dataclasses.MISSING and f.default is not None:
            default = f.default
            out["default"] = list(default) if isinstance(default, tuple) else default
        return out

    def type(self, hint: Any, meta: Mapping[str, Any]) -> Schema:
        """``hint``'s schema. ``enum``, ``minimum`` and ``pattern`` apply to the innermost
        values of an array; ``shape`` gives each level's size (None: any; ``experts`` or
        ``classes``: one per expert or class)."""
        origin, args = get_origin(hint), get_args(hint)
        if "enum" in meta and self.vocabulary is not None and not is_array(hint):
            return {"enum": self.vocabulary.values(meta["enum"])}
        if is_array(hint):
            return self._array(args[0], meta)
        if origin in (Union, types.UnionType):
            options = [a for a in args if a is not type(None)]
            picked = self._for_task(options)
            inner = (
                self.type(picked[0], meta)
                if len(picked) == 1
                else {"anyOf": [self.type(a, meta) for a in picked]}
            )
            return {"anyOf": [inner, NULL]} if type(None) in args else inner
        if origin is Literal:
            return {"enum": list(args)}
        if origin is not None and issubclass(origin, Mapping):
            value = self.type(args[1], {})
            if self.vocabulary is not None and "keys" in meta:
                keys = self.vocabulary.keys(meta["keys"])
                return {"type": "object", "properties": {k: value for k in keys},
                        "required": list(keys), "additionalProperties": False}  # fmt: skip
            return {"type": "object"} if value == {} else {
                "type": "object", "additionalProperties": value
            }  # fmt: skip
        if dataclasses.is_dataclass(hint):
            return self.of(hint)  # type: ignore[arg-type]
        out = dict(_SCALARS[hint])
        for key in ("pattern", "minimum"):
            if key in meta:
                out[key] = meta[key]
        return out

    def _array(self, item: Any, meta: Mapping[str, Any]) -> Schema:
        v, shape = self.vocabulary, meta.get("shape", (None,))
        inner = {k: meta[k] for k in ("enum", "minimum", "pattern") if k in meta}
        if len(shape) > 1:
            inner["shape"] = shape[1:]
        out: Schema = {"type": "array", "items": self.type(item, inner)}
        if shape[0] is not None and v is not None:
            out["minItems"] = out["maxItems"] = len(v.keys(shape[0]))
        if "items" in meta and v is not None:
            out["items"] = ref(meta["items"])  # the bundle's own, made beside these
        if "min_items" in meta:
            out["minItems"] = meta["min_items"]
        if "max_items" in meta and v is not None:
            out["maxItems"] = getattr(v, meta["max_items"])
        if meta.get("unique"):
            out["uniqueItems"] = True
        return out

    def _for_task(self, options: list[Any]) -> list[Any]:
        """The dataclasses of the bundle's task among ``options`` (all without a bundle)."""
        v = self.vocabulary
        if v is None or not all(dataclasses.is_dataclass(o) for o in options):
            return options
        return [o for o in options if getattr(o, "task", v.task) == v.task] or options


def _without_none(hint: Any) -> Any:
    args = [a for a in get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007


def _per_row(hint: Any, meta: Mapping[str, Any], per_row: bool) -> tuple[Any, dict[str, Any]]:
    """A field sent per expert, or per row and expert (``per_row_shape``) where the bundle
    says so: the array type of the matching depth, and its shape."""
    shape = meta["per_row_shape"] if per_row else meta["shape"]
    picked = next(a for a in get_args(hint) if _depth(a) == len(shape))
    return picked, {**meta, "shape": shape}


def _depth(hint: Any) -> int:
    return 1 + _depth(get_args(hint)[0]) if is_array(hint) else 0
