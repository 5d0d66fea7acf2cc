"""The mutants of one module: one-token changes inside its functions, found on the AST.

Operators, as mutmut's and cosmic-ray's core ones: a comparison flipped (``<`` to ``<=``,
``==`` to ``!=``, ``in`` to ``not in``, ...), an arithmetic operator swapped (``+`` and
``-``, ``*`` and ``/``, ...), ``and`` and ``or`` swapped, a ``not`` dropped, ``True`` and
``False`` swapped, a number plus one, and a statement removed (replaced by ``pass``, or a
``return`` by ``return None``). Only function bodies are mutated (module constants are
copied into importers at import time, so a change there is not seen by them).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass

COMPARE: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}  # fmt: skip
ARITH: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult,
    ast.LShift: ast.RShift, ast.RShift: ast.LShift, ast.BitOr: ast.BitAnd,
    ast.BitAnd: ast.BitOr,
}  # fmt: skip
REMOVABLE = (
    ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Raise, ast.If,
    ast.For, ast.While, ast.With, ast.Continue, ast.Break, ast.Try,
)  # fmt: skip


@dataclass(frozen=True)
class Mutant:
    """One mutant: where (function qualname, line), what, and the mutated module's tree."""

    module: str
    qualname: str
    line: int
    col: str  # start-end columns: nested nodes start at one column
    operator: str
    description: str
    tree: ast.Module

    @property
    def name(self) -> str:
        return f"{self.module}:{self.line}:{self.col}:{self.operator}:{self.description}"


def functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Top-level functions and methods of top-level classes, with their qualnames."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield f"{node.name}.{sub.name}", sub


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _changes(node: ast.AST) -> Iterator[tuple[str, str, ast.AST]]:
    """Each one-token change of ``node`` itself: (operator, description, replacement)."""
    if isinstance(node, ast.Compare):
        for k, op in enumerate(node.ops):
            if type(op) in COMPARE:
                cmp = copy.copy(node)
                cmp.ops = [*node.ops[:k], COMPARE[type(op)](), *node.ops[k + 1 :]]
                yield "compare", f"{type(op).__name__}->{COMPARE[type(op)].__name__}", cmp
    elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in ARITH:
        arith = copy.copy(node)
        arith.op = ARITH[type(node.op)]()
        yield "arith", f"{type(node.op).__name__}->{type(arith.op).__name__}", arith
    elif isinstance(node, ast.BoolOp):
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        boolop = copy.copy(node)
        boolop.op = other
        yield "boolop", f"{type(node.op).__name__}->{type(other).__name__}", boolop
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "not", "drop not", node.operand
    elif isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            yield "bool", f"{v}->{not v}", ast.Constant(not v)
        elif isinstance(v, int | float) and not isinstance(v, bool):
            yield "number", f"{v!r}->{v + 1!r}", ast.Constant(v + 1)


def _statement_change(stmt: ast.stmt) -> tuple[str, ast.stmt] | None:
    if not isinstance(stmt, REMOVABLE) or _is_docstring(stmt):
        return None
    if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
        return None  # an annotation alone does nothing
    if isinstance(stmt, ast.Return):
        if stmt.value is None or (
            isinstance(stmt.value, ast.Constant) and stmt.value.value is None
        ):
            return None
        return "return None", ast.Return(ast.Constant(None))
    return f"remove {type(stmt).__name__}", ast.Pass()


class _Replace(ast.NodeTransformer):
    def __init__(self, target: ast.AST, replacement: ast.AST) -> None:
        self.target, self.replacement = target, replacement

    def visit(self, node: ast.AST) -> ast.AST:
        if node is self.target:
            return self.replacement
        return super().visit(node)


def _mutated(tree: ast.Module, target: ast.AST, replacement: ast.AST) -> ast.Module:
    """A copy of ``tree`` with ``target`` replaced (the original is left as it is)."""
    memo: dict[int, ast.AST] = {}
    new_tree = copy.deepcopy(tree, memo)
    new_target = memo[id(target)]
    replaced = ast.fix_missing_locations(
        _Replace(new_target, ast.copy_location(replacement, target)).visit(new_tree)
    )
    assert isinstance(replaced, ast.Module)
    return replaced


def _skip(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Annotations and f-string format specs are not behaviour."""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.arg | ast.AnnAssign) and node is parent.annotation:
            return True
        if isinstance(parent, ast.FormattedValue) and node is parent.format_spec:
            return True
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef) and node is parent.returns:
            return True
        node = parent
    return False


def mutants(module: str, source: str) -> list[Mutant]:
    """Every mutant of ``source`` (the module named ``module``), in source order."""
    tree = ast.parse(source)
    found: list[Mutant] = []
    for qualname, fn in functions(tree):
        parents = {c: p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
        body_nodes = [n for stmt in fn.body for n in ast.walk(stmt)]
        for node in body_nodes:
            if _skip(node, parents) or not hasattr(node, "lineno"):
                continue
            line: int = getattr(node, "lineno")  # noqa: B009 (ast.AST types no position)
            col = f"{getattr(node, 'col_offset')}-{getattr(node, 'end_col_offset', '')}"  # noqa: B009
            for op, what, new in _changes(node):
                found.append(
                    Mutant(module, qualname, line, col, op, what, _mutated(tree, node, new))
                )
            if isinstance(node, ast.stmt):
                change = _statement_change(node)
                if change is not None:
                    what, new_stmt = change
                    found.append(
                        Mutant(
                            module,
                            qualname,
                            line,
                            col,
                            "statement",
                            what,
                            _mutated(tree, node, new_stmt),
                        )
                    )
    found.sort(key=lambda m: (m.line, m.col))
    return found
