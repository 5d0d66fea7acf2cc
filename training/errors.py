"""Exceptions raised by ``training``: each names the parameter, its value, and the fault."""

from __future__ import annotations

from app.errors import CommandError, CommandWarning, option_fault


class IABMAError(CommandError):
    """Base class for every error this package raises on purpose; the CLI shows it as one
    line and exits 2."""


class ParameterError(IABMAError, ValueError):
    """A bad argument: ``ParameterError("target", "prise", "is not a column of the CSV")``."""

    def __init__(self, parameter: str, value: object, problem: str) -> None:
        self.parameter = parameter
        self.value = value
        self.problem = problem
        super().__init__(option_fault(parameter, value, problem))


class ExportError(IABMAError):
    """An expert or gate could not be converted to ONNX faithfully."""


class NotFittedError(IABMAError, AttributeError):
    """A fitted-only method was called before ``fit``."""


class CsvError(IABMAError, ValueError):
    """A CSV file that cannot be used as it is; the message names the file and the column."""

    def __init__(self, path: object, problem: str, column: str | None = None) -> None:
        self.path = str(path)
        self.column = column
        self.problem = problem
        where = f"{self.path}: column {column!r}: " if column is not None else f"{self.path}: "
        super().__init__(where + problem)


class DataWarning(CommandWarning):
    """Something about the user's data we changed or would question (shown by the CLI)."""
