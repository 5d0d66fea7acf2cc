"""ModelInfer's one-pass path (app.oip_grpc.wire) gives the general path's request and
answer, and leaves to it every call it does not take whole (checked in a child process:
tests/support/wire_checks.py)."""

from __future__ import annotations

import json
import subprocess

from tests.support.bundles import Bundles
from tests.support.harness import PYTHON, ROOT


def test_the_one_pass_agrees_with_the_general_path(bundles: Bundles) -> None:
    rows = {
        "demo": bundles.demo.instances(slice(0, 70)),
        "credit": bundles.credit.instances(slice(0, 70)),
        "creditcls": bundles.creditcls.instances(slice(0, 70)),
    }
    out = subprocess.run(
        [PYTHON, "-m", "tests.support.wire_checks", str(bundles.store)],
        cwd=ROOT,
        input=json.dumps(rows),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["checks", "passed:", "15"]
