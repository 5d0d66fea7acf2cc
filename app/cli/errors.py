"""What a command refuses: a bad option or input, shown as one line and exit code 2."""

from __future__ import annotations


class CommandError(Exception):
    """A bad argument or input file; the message names it."""


class CommandWarning(UserWarning):
    """Something about the user's input that a command changed or would question."""


def option_fault(option: str, value: object, problem: str) -> str:
    """``--name='x' problem``: the option, its value (cut to 200 characters), the fault."""
    shown = repr(value)
    if len(shown) > 200:
        shown = shown[:197] + "..."
    return f"{option}={shown} {problem}"
