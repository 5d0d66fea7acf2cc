"""Exceptions raised by ``training``: each names the parameter, its value, and the fault."""

from __future__ import annotations


class IABMAError(Exception):
    """Base class for every error this package raises on purpose."""


class ParameterError(IABMAError, ValueError):
    """A bad argument: ``ParameterError("target", "prise", "is not a column of the CSV")``."""

    def __init__(self, parameter: str, value: object, problem: str) -> None:
        self.parameter = parameter
        self.value = value
        self.problem = problem
        shown = repr(value)
        if len(shown) > 200:
            shown = shown[:197] + "..."
        super().__init__(f"{parameter}={shown} {problem}")


class ExportError(IABMAError):
    """An expert or gate could not be converted to ONNX faithfully."""


class NotFittedError(IABMAError, AttributeError):
    """A fitted-only method was called before ``fit``."""
