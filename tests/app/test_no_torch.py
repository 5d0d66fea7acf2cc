"""Serving imports onnxruntime, numpy, FastAPI, pydantic, SQLAlchemy and prometheus_client:
no torch, no training, and no OpenTelemetry while tracing is off."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

from tests.support.bundles import Bundles
from tests.support.harness import PYTHON, ROOT

FORBIDDEN = {"torch", "training", "sklearn", "joblib", "pickle", "cloudpickle"}

SCRIPT = """
import asyncio, json, sys
import httpx
from app.main import create_app
from app.settings import Settings

async def main():
    app = create_app(Settings(store=sys.argv[1], model_name="demo", audit_url=sys.argv[2]))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            r = await client.post("/predict", json={"instances": [{"x1": 0.1, "x2": 0.2}]})
            assert r.status_code == 200, r.text
            r = await client.get("/weights", params={"x1": "0.1", "x2": "0.2"})
            assert r.status_code == 200, r.text
            tensors = [
                {"name": n, "datatype": "FP32", "shape": [1], "data": [0.5]} for n in ("x1", "x2")
            ]
            r = await client.post("/v2/models/demo/infer", json={"inputs": tensors})
            assert r.status_code == 200, r.text

asyncio.run(main())
print(json.dumps(sorted(sys.modules)))
"""


def test_serving_leaves_torch_training_and_sklearn_out(bundles: Bundles, tmp_path: Path) -> None:
    audit = f"sqlite:///{tmp_path / 'audit.db'}"
    done = subprocess.run(
        [PYTHON, "-c", SCRIPT, str(bundles.store), audit],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert "onnxruntime" in modules and "app.main" in modules
    loaded = {m.split(".")[0] for m in modules}
    for banned in ("torch", "training", "sklearn", "joblib", "cloudpickle"):
        assert banned not in loaded, f"serving imported {banned}"
    # Tracing is off unless OTEL_* variables are set, and then neither the SDK nor the
    # instrumentation is imported (FastAPI itself may import the OpenTelemetry API).
    assert not [m for m in modules if m.startswith(("opentelemetry.sdk", "opentelemetry.inst"))]


def test_no_module_of_app_imports_a_forbidden_package() -> None:
    for file in (ROOT / "app").rglob("*.py"):
        tree = ast.parse(file.read_text(), filename=str(file))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{file}: imports {name}"
