"""A staged version that fails to open, or fails on requests, never fails a served one; a
version the served requests cannot feed is refused at staging, naming why."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from app.bundle.loader import read_manifest, sha256_file
from app.bundle.pointer import RolloutError
from app.bundle.staged import STAGED_FILE, check_feedable, stage, staged, unstage
from app.cli.main import main
from tests.support.bundles import Bundles, check_contract, make_settings
from tests.support.harness import AsgiHarness
from tests.support.metrics import scrape, total
from tests.support.services import wait_for
from tests.support.trail import Trail

TOKEN = "shadow-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def copy_version(store: Path, old: str, new: str) -> Path:
    """``old`` under the name ``new``: the same experts and gate, a version to stage."""
    path = Path(shutil.copytree(store / "demo" / old, store / "demo" / new))
    for f in path.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["version"] = new
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def failing_gate(path: Path) -> None:
    """Replace the gate with one that reshapes its rows to one: it opens, then fails on
    any request of more than one row; the manifest's checksum follows."""
    manifest = json.loads((path / "manifest.json").read_text())
    m = len(manifest["experts"])
    first = manifest["features"][0]["input"]
    inputs = [
        helper.make_tensor_value_info(f["input"], TensorProto.FLOAT, [None, 1])
        for f in manifest["features"]
    ]
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, 1])
    ones = helper.make_tensor("ones", TensorProto.FLOAT, [1, m], [1.0 / m] * m)
    nodes = [
        helper.make_node("Reshape", [first, "shape"], ["one"]),
        helper.make_node("Mul", ["one", "ones"], ["weights"]),
    ]
    out = helper.make_tensor_value_info("weights", TensorProto.FLOAT, [1, m])
    graph = helper.make_graph(nodes, "bad_gate", inputs, [out], [shape, ones])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path / "gate.onnx")
    manifest["gate"]["sha256"] = sha256_file(path / "gate.onnx")
    (path / "manifest.json").write_text(json.dumps(manifest))


def faults(app: AsgiHarness, stage_name: str) -> float:
    samples, _ = scrape(app)
    return total(samples, "iabma_shadow_faults_total", stage=stage_name)


def test_a_broken_staged_version_never_fails_a_served_request(
    bundles: Bundles, store_copy: Path, tmp_path: Path
) -> None:
    v1 = bundles.demo.version
    rows = bundles.demo.instances(slice(0, 8))
    settings = make_settings(store_copy, tmp_path, admin_token=TOKEN, reload_interval_seconds=0)
    with AsgiHarness(settings) as app:
        shadow = app.service.shadow
        want = app.post("/predict", json={"instances": rows}).json()["predictions"]
        before = {s: faults(app, s) for s in ("load", "score")}

        # Staged, then its gate file changed behind the checksum: it does not open.
        bad = copy_version(store_copy, v1, "v-tampered")
        stage(store_copy, "demo", "v-tampered")
        (bad / "gate.onnx").write_bytes((bad / "gate.onnx").read_bytes() + b"\x00")
        assert app.post("/admin/reload", headers=AUTH).status_code == 200
        assert shadow.gate is None and shadow.stopped is not None
        assert "gate.onnx has sha256" in shadow.stopped["error"]
        r = app.post("/predict", json={"instances": rows})
        assert r.status_code == 200 and r.json()["predictions"] == want
        assert faults(app, "load") == before["load"] + 1

        # Staged and opened, then failing on every group of requests: shadowing stops.
        failing_gate(copy_version(store_copy, v1, "v-failing"))
        stage(store_copy, "demo", "v-failing")
        assert app.post("/admin/reload", headers=AUTH).status_code == 200
        assert shadow.gate is not None and shadow.gate.version == "v-failing"
        for _ in range(3):
            r = app.post("/predict", json={"instances": rows})
            assert r.status_code == 200 and r.json()["predictions"] == want
        wait_for(lambda: shadow.gate is None, 10, "the failing staged version to stop")
        assert shadow.stopped is not None and shadow.stopped["version"] == "v-failing"
        assert shadow.stopped["error"].startswith("score:")
        assert faults(app, "score") == before["score"] + 1
        assert app.post("/admin/reload", headers=AUTH).status_code == 200
        assert shadow.gate is None, "a stopped version is not tried again until STAGED moves"
        r = app.post("/predict", json={"instances": rows})
        assert r.status_code == 200 and r.json()["predictions"] == want
        block = app.get("/performance?compare=staged").json()["staged"]
        assert block["version"] == "v-failing" and block["rows"] == 0
        assert block["shadow_stopped"]["version"] == "v-failing"


def test_staging_refuses_what_served_requests_cannot_feed(
    bundles: Bundles, store_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v1 = bundles.demo.version
    served = read_manifest(store_copy / "demo" / v1)
    feature = served.features[0].model_copy(update={"name": "x_new", "input": "x_new"})
    expert = served.experts[1].model_copy(update={"inputs": ["x_new"]})
    wider = served.model_copy(
        update={
            "version": "v2",
            "features": [*served.features, feature],
            "experts": [served.experts[0], expert, *served.experts[2:]],
        }
    )
    with pytest.raises(RolloutError) as err:
        check_feedable(served, wider)
    msg = str(err.value)
    assert f"expert {served.experts[1].name} reads feature 'x_new'" in msg
    assert "served requests do not carry" in msg
    other = served.model_copy(update={"version": "v3", "task": "regression"})
    with pytest.raises(RolloutError, match="its task is regression"):
        check_feedable(served, other)

    # Through the command: the served version itself, and one that does not exist.
    assert main(["stage", "--store", str(store_copy), "--name", "demo", v1]) == 2
    assert "is the one served" in capsys.readouterr().err
    assert main(["stage", "--store", str(store_copy), "--name", "demo", "nope"]) == 2
    assert "does not exist" in capsys.readouterr().err
    copy_version(store_copy, v1, "v-same")
    assert main(["stage", "--store", str(store_copy), "--name", "demo", "v-same"]) == 0
    assert staged(store_copy / "demo") == "v-same"
    assert (store_copy / "demo" / STAGED_FILE).read_text() == "v-same\n"
    assert main(["unstage", "--store", str(store_copy), "--name", "demo"]) == 0
    assert staged(store_copy / "demo") is None and unstage(store_copy, "demo") is None


def test_every_protocol_is_shadowed(bundles: Bundles, store_copy: Path, tmp_path: Path) -> None:
    """/predict, the OIP route over REST and over gRPC: each request's staged answer is
    kept under its record's request id."""
    import httpx
    import tritonclient.grpc as tgrpc

    from app.audit.store.packing import unpack_request_id
    from tests.support.oip import serve

    copy_version(store_copy, bundles.demo.version, "v-same")
    stage(store_copy, "demo", "v-same")
    server = serve(bundles, "demo", tmp_path, IABMA_STORE=str(store_copy))
    x = {"x1": [0.1, 0.4], "x2": [-0.2, 0.3]}
    with server.proc:
        server.proc.wait_ready()
        base = server.base_url
        rows = [{"x1": a, "x2": b} for a, b in zip(x["x1"], x["x2"], strict=True)]
        assert httpx.post(f"{base}/predict", json={"instances": rows}).status_code == 200
        oip = {
            "inputs": [
                {"name": k, "shape": [2, 1], "datatype": "FP32", "data": v} for k, v in x.items()
            ]
        }
        assert httpx.post(f"{base}/v2/models/demo/infer", json=oip).status_code == 200
        client = tgrpc.InferenceServerClient(server.grpc)
        inputs = []
        for name, values in x.items():
            t = tgrpc.InferInput(name, [2, 1], "FP32")
            t.set_data_from_numpy(np.array(values, dtype=np.float32)[:, None])
            inputs.append(t)
        client.infer("demo", inputs)

        def kept() -> list[str]:
            with sqlite3.connect(server.audit_db) as conn:
                try:
                    found = conn.execute("SELECT request_ids FROM iabma_shadow").fetchall()
                except sqlite3.OperationalError:
                    return []  # the table is made with the first group
            return sorted(rid for (ids,) in found for rid in ids.split("\n"))

        wait_for(lambda: len(kept()) == 3, 20, "three shadowed requests")
        with sqlite3.connect(server.audit_db) as conn:
            logged = [unpack_request_id(r) for (r,) in conn.execute(
                "SELECT request_id FROM iabma_audit_log"
            )]  # fmt: skip
    assert kept() == sorted(logged)


def test_a_staged_copy_of_the_served_version_scores_as_it(
    bundles: Bundles, store_copy: Path, tmp_path: Path, trail: Trail
) -> None:
    """The same gate and experts staged: every paired row's staged NLL is the served one,
    on SQLite and PostgreSQL, and the live rule refuses to promote a version no better."""
    copy_version(store_copy, bundles.demo.version, "v-same")
    stage(store_copy, "demo", "v-same")
    rows = bundles.demo.instances(slice(0, 60))
    settings = make_settings(store_copy, tmp_path, audit_url=trail.url, reload_interval_seconds=0)
    with AsgiHarness(settings) as app:
        for k in range(0, 60, 20):
            rid = f"same{k}"
            r = app.post(
                "/predict", json={"instances": rows[k : k + 20]}, headers={"X-Request-ID": rid}
            )
            assert r.status_code == 200, r.text
            labels = [p["prediction"]["label"] for p in r.json()["predictions"]]
            outcomes = [{"request_id": rid, "row": i, "outcome": y} for i, y in enumerate(labels)]
            assert app.post("/feedback", json={"outcomes": outcomes}).status_code == 200
        wait_for(app.service.shadow.idle, 10, "the shadow to keep every request")
        body = app.get("/performance?compare=staged").json()
        check_contract(app, "Performance", body)
        block = body["staged"]
    assert block["rows"] == 60 and block["version"] == "v-same"
    assert abs(block["nll_diff"]) < 1e-6 and block["staged_nll"] == pytest.approx(
        block["served_nll"], abs=1e-6
    )
    assert sum(b["rows"] for b in block["over_time"]) == 60
    assert set(block["weight_drift"]["psi"]) == set(
        read_manifest(store_copy / "demo" / "v-same").expert_names
    )
    groups = trail.rows("SELECT request_ids FROM iabma_shadow")
    assert sorted(r for (ids,) in groups for r in ids.split("\n")) == ["same0", "same20", "same40"]
    code = main(["promote", "--store", str(store_copy), "--name", "demo", "--if-better-live",
                 "--min-rows", "10", "--audit-url", trail.url])  # fmt: skip
    assert code == 3 and staged(store_copy / "demo") == "v-same"
