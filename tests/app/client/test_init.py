"""The client needs httpx and the standard library only: nothing of the server, no numpy."""

from __future__ import annotations

import json
import subprocess

from tests.support.harness import PYTHON, ROOT

SCRIPT = """
import json, sys
import app.client
from app.client import Client, AsyncClient
Client("http://127.0.0.1:1").close()
print(json.dumps(sorted(sys.modules)))
"""
HEAVY = {"numpy", "pandas", "pyarrow", "pydantic", "fastapi", "starlette", "orjson",
         "onnxruntime", "sqlalchemy", "uvicorn", "torch"}  # fmt: skip


def test_importing_the_client_loads_no_server_code_and_no_numpy() -> None:
    done = subprocess.run(
        [PYTHON, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "httpx" in modules
    assert not {m.split(".")[0] for m in modules} & HEAVY
    ours = sorted(m for m in modules if m == "app" or m.startswith("app."))
    assert all(m == "app" or m.startswith(("app.client", "app.contract")) for m in ours), ours
