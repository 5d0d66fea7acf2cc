"""Run a module's mutants against its tests, one forked child per mutant, inside one pytest
session whose session-scoped fixtures (trained bundles) are built once.

A pytest plugin takes over the run loop: it runs the collected tests once unmutated (all
must pass), keeps the session's fixtures, then per mutant forks; the child swaps the
mutated function's code object into the live function (so every module that imported it
sees the change), runs the tests until the first failure, and exits 1 if one failed. A
child that outlives its time limit is killed and counted as killed by a timeout.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import signal
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bench.mutation.operators import Mutant, mutants


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield const
            yield from _code_objects(const)


def _live_function(module: types.ModuleType, qualname: str) -> types.FunctionType | None:
    """The function object the module's importers hold, unwrapped from its descriptor."""
    obj: Any = module
    for part in qualname.split("."):
        holder = vars(obj) if isinstance(obj, type | types.ModuleType) else {}
        obj = holder.get(part)
        if obj is None:
            return None
    for attr in ("fget", "func", "__func__", "__wrapped__"):
        if not isinstance(obj, types.FunctionType) and hasattr(obj, attr):
            obj = getattr(obj, attr)
    return obj if isinstance(obj, types.FunctionType) else None


def apply(mutant: Mutant, module: types.ModuleType) -> str | None:
    """Swap the mutated code into the live function; why not, if it cannot be."""
    filename = getattr(module, "__file__", None) or "<mutant>"
    code = compile(mutant.tree, filename, "exec")
    fn = _live_function(module, mutant.qualname)
    if fn is None:
        return f"no live function {mutant.qualname}"
    for new in _code_objects(code):
        if new.co_qualname == fn.__code__.co_qualname:
            try:
                fn.__code__ = new
            except ValueError as exc:  # a different closure
                return str(exc)
            return None
    return f"no code for {mutant.qualname}"


class _SessionOnly:
    """A stand-in next item whose only ancestor is the session: the tests' teardown
    after it leaves the session's fixtures up and every narrower one torn down, so that
    no module fixture computed with the unmutated code is reused by a mutant."""

    def __init__(self, session: pytest.Session) -> None:
        self.session = session

    def listchain(self) -> list[Any]:
        return [self.session]


@dataclass
class Outcome:
    mutant: str
    qualname: str
    line: int
    status: str  # killed, survived, timeout, not-applied
    seconds: float


@dataclass
class MutationPlugin:
    module_name: str
    out: Path
    only_lines: set[int] | None = None
    factor: float = 3.0
    results: list[Outcome] = field(default_factory=list)
    failed: bool = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed = True

    def _run_items(self, session: pytest.Session, keep: bool) -> bool:
        """Run every item, stopping at the first failure; ``keep`` leaves the session's
        fixtures set up after the last one."""
        items = session.items
        self.failed = False
        for i, item in enumerate(items):
            last: Any = _SessionOnly(session) if keep else None
            nextitem = items[i + 1] if i + 1 < len(items) else last
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if self.failed:
                return False
        return True

    def _child(self, session: pytest.Session, mutant: Mutant | None) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:  # it writes to a copy of the terminal's descriptor
            session.config.pluginmanager.unregister(reporter)
        module = importlib.import_module(self.module_name)
        if mutant is not None and apply(mutant, module) is not None:
            os._exit(3)
        os._exit(0 if self._run_items(session, keep=False) else 1)

    def _one(self, session: pytest.Session, mutant: Mutant | None, limit: float) -> Outcome:
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                self._child(session, mutant)
            finally:
                os._exit(4)
        status = "timeout"
        while time.monotonic() - t0 < limit:
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(code)
                status = {0: "survived", 1: "killed", 3: "not-applied"}.get(rc, f"killed(rc={rc})")
                break
            time.sleep(0.02)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        took = round(time.monotonic() - t0, 2)
        if mutant is None:
            return Outcome("unmutated", "", 0, status, took)
        return Outcome(mutant.name, mutant.qualname, mutant.line, status, took)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        if session.config.option.collectonly:
            return False
        module = importlib.import_module(self.module_name)
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        found = [m for m in mutants(self.module_name, source)
                 if self.only_lines is None or m.line in self.only_lines]  # fmt: skip
        t0 = time.monotonic()
        if not self._run_items(session, keep=True):
            raise pytest.UsageError("the tests fail on the unmutated code")
        clean = time.monotonic() - t0
        # A child runs without building the session's fixtures: time one unmutated.
        child = self._one(session, None, 10 * clean + 60)
        if child.status != "survived":
            raise pytest.UsageError(f"an unmutated child ends {child.status}")
        limit = max(15.0, self.factor * child.seconds)
        print(
            f"\n{len(session.items)} tests pass in {clean:.1f} s ({child.seconds:.1f} s in a "
            f"child); {len(found)} mutants, each killed after {limit:.0f} s",
            flush=True,
        )
        for k, mutant in enumerate(found):
            done = self._one(session, mutant, limit)
            self.results.append(done)
            print(f"[{k + 1}/{len(found)}] {done.status:9} {done.seconds:6.1f} s  {mutant.name}",
                  flush=True)  # fmt: skip
        self.write(clean, limit, len(session.items))
        return True

    def write(self, clean: float, limit: float, tests: int) -> None:
        killed = [r for r in self.results if r.status.startswith("killed") or r.status == "timeout"]
        survived = [r for r in self.results if r.status == "survived"]
        data = {
            "module": self.module_name,
            "tests": tests,
            "clean_run_s": round(clean, 1),
            "limit_s": round(limit, 1),
            "mutants": len(self.results),
            "killed": len(killed),
            "survived": len(survived),
            "not_applied": sum(r.status == "not-applied" for r in self.results),
            "results": [vars(r) for r in self.results],
        }
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(data, indent=1), encoding="utf-8")


def unparsed(mutant: Mutant) -> str:
    """The mutated function's source, to read a survivor."""
    for node in ast.walk(mutant.tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno == mutant.line:
            return ast.unparse(node)
    return ast.unparse(mutant.tree)


def run(module: str, tests: list[str], out: Path, pytest_args: list[str], lines: set[int] | None,
        factor: float) -> int:  # fmt: skip
    plugin = MutationPlugin(module, out, lines, factor)
    code = pytest.main([*tests, "-q", "-p", "no:cacheprovider", *pytest_args], plugins=[plugin])
    return int(code) if not plugin.results else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(sys.argv[1], sys.argv[2:], Path("mutation.json"), [], None, 5.0))
