"""Mutation testing of the modules that carry the trail's and the bundles' promises.

``python bench/mutate.py chain`` (or verify, loader, inputs, feedback, gate) runs every
mutant of that module (:mod:`bench.mutation.operators`) against its own test modules, one
forked child per mutant (:mod:`bench.mutation.runner`), and writes
``bench/results/mutation-<module>.json``; docs/mutation.md reads the figures and judges the
survivors. ``--lines 12,40`` runs only the mutants on those lines (to retest survivors).

Why not mutmut 3: it runs ``pytest.main`` afresh in each mutant's child, so the session's
fixtures (three bundles trained, about a minute on 2 cores) would be built again for each
of hundreds of mutants. Here the child is forked once they are built.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.mutation.runner import run  # noqa: E402

# Per module: its tests, and options that keep the run bounded (SQLite trails only: the
# PostgreSQL variants run the same code of these modules).
PRESETS: dict[str, tuple[str, list[str]]] = {
    "chain": ("app.audit.store.chain", [
        "tests/app/audit/store/test_chain_bytes.py", "tests/app/audit/check/test_verify.py",
    ]),
    "verify": ("app.audit.check.verify", [
        "tests/app/audit/check/test_verify_walk.py", "tests/app/audit/check/test_verify.py",
        "tests/app/cli/test_audit_verify.py",
    ]),
    "loader": ("app.bundle.loader", [
        "tests/app/bundle/test_loader_unit.py", "tests/app/bundle/test_loader.py",
    ]),
    "inputs": ("app.core.inputs", [
        "tests/app/core/test_inputs.py", "tests/app/core/test_inputs_paths.py",
    ]),
    "feedback": ("app.core.feedback", [
        "tests/app/core/test_feedback_decode.py", "tests/app/core/test_feedback.py",
        "tests/app/core/test_feedback_hostile.py", "tests/app/core/test_feedback_trust.py",
    ]),
    "gate": ("training.refit.gate", [
        "tests/training/refit/test_refit_split.py", "tests/training/refit/test_refit_gate_parts.py",
        "tests/training/refit/test_refit_gate.py",
    ]),
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", choices=sorted(PRESETS))
    parser.add_argument("--lines", help="only the mutants on these lines, comma-separated")
    parser.add_argument("--factor", type=float, default=3.0,
                        help="a mutant's time limit, in unmutated child runs")  # fmt: skip
    parser.add_argument("--out", type=Path, help="default: bench/results/mutation-MODULE.json")
    args, extra = parser.parse_known_args(argv)
    name, tests = PRESETS[args.module]
    tests = [t for t in tests if (REPO / t).is_file()]
    lines = {int(x) for x in args.lines.split(",")} if args.lines else None
    out = args.out or REPO / "bench" / "results" / f"mutation-{args.module}.json"
    return run(name, tests, out, ["-k", "not postgres", *extra], lines, args.factor)


if __name__ == "__main__":
    sys.exit(main())
