"""The experts' cross-fitting gives the same bundle wherever it runs: serially, in local
processes (joblib), or on a Dask cluster (joblib's Dask backend)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from training.datasets import simulate
from training.errors import ParameterError
from training.estimator import IABMAClassifier
from training.experts.defaults import simulation_experts
from training.experts.parallel import SCHEDULER_ENV, run_all, scheduler_address
from training.export.bundle import export_bundle

N_ROWS = 600


def _bundle(tmp: Path, name: str, **where) -> tuple[IABMAClassifier, dict[str, str]]:
    """Fit on the simulation, export, and return every bundle file's sha256 by path."""
    train, test = simulate(N_ROWS, 3), simulate(200, 4)
    est = IABMAClassifier(simulation_experts(), random_state=0, **where).fit(train.X, train.y)
    path = export_bundle(est, tmp, name, test.X)
    manifest = json.loads((path / "manifest.json").read_text())
    files = {e["file"]: e["sha256"] for e in manifest["experts"]}
    files["gate.onnx"] = manifest["gate"]["sha256"]
    files["ensemble.onnx"] = manifest["ensemble"]["sha256"]
    return est, files


@pytest.fixture(scope="module")
def serial(tmp_path_factory) -> tuple[IABMAClassifier, dict[str, str]]:
    return _bundle(tmp_path_factory.mktemp("serial"), "sim")


def _same(a: IABMAClassifier, b: IABMAClassifier) -> None:
    np.testing.assert_array_equal(a.experts_.predictions_, b.experts_.predictions_)
    np.testing.assert_array_equal(a.evidence_.log_lik, b.evidence_.log_lik)
    X = simulate(100, 9).X
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))


def test_two_local_processes_give_the_serial_bundle(serial, tmp_path) -> None:
    est, files = _bundle(tmp_path, "sim", n_jobs=2)
    _same(serial[0], est)
    assert files == serial[1]


def test_a_dask_cluster_gives_the_serial_bundle(serial, tmp_path) -> None:
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        assert len(client.scheduler_info()["workers"]) == 2
        before = client.run_on_scheduler(_tasks_done)
        est, files = _bundle(tmp_path, "sim", scheduler=cluster.scheduler_address)
        # The fits really ran on the cluster: 5 experts x (5 folds + 1 refit).
        assert client.run_on_scheduler(_tasks_done) - before >= 30
    _same(serial[0], est)
    assert files == serial[1]


def _tasks_done(dask_scheduler) -> int:  # runs on the scheduler
    return sum(
        p.state_counts.get("memory", 0) + p.state_counts.get("forgotten", 0)
        for p in dask_scheduler.task_prefixes.values()
    )


def test_scheduler_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(SCHEDULER_ENV, "tcp://10.0.0.1:8786")
    assert scheduler_address(None) == "tcp://10.0.0.1:8786"
    assert scheduler_address("tcp://other:1") == "tcp://other:1"
    monkeypatch.delenv(SCHEDULER_ENV)
    assert scheduler_address(None) is None


@pytest.mark.parametrize("n_jobs", [0, -2, 1.5, True])
def test_bad_n_jobs_is_named(n_jobs) -> None:
    with pytest.raises(ParameterError) as err:
        run_all(abs, [(1,)], n_jobs=n_jobs)
    assert err.value.parameter == "n_jobs"


def test_an_unreachable_scheduler_is_named() -> None:
    pytest.importorskip("distributed")
    with pytest.raises(ParameterError) as err:
        run_all(abs, [(1,)], scheduler="tcp://127.0.0.1:1")
    assert err.value.parameter == "scheduler"


_CONVERT = """
import hashlib, sys
import numpy as np, pandas as pd
from sklearn.compose import make_column_transformer
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from training.experts.onnx import convert_sklearn_model
X = pd.DataFrame(np.random.default_rng(0).normal(size=(40, 2)), columns=["a", "b"])
scale = make_column_transformer((StandardScaler(), ["a"]), (StandardScaler(), ["b"]))
m = make_pipeline(scale, KNeighborsClassifier(3))
m.fit(X, X["a"] > 0)
g = convert_sklearn_model(m, ["a", "b"], ["a", "b"], ["float", "float"], "classification", "m")
sys.stdout.write(hashlib.sha256(g.data).hexdigest())
"""


def test_a_conversion_gives_the_same_bytes_under_any_hash_seed() -> None:
    """Each process (a Dask worker, the CLI) has its own string hash seed; skl2onnx's
    opset list followed it, so the same model gave other bytes in another process."""
    import os
    import subprocess
    import sys

    digests = set()
    for seed in map(str, range(8)):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _CONVERT], env=env, capture_output=True, text=True, check=True
        )
        digests.add(out.stdout)
    assert len(digests) == 1
