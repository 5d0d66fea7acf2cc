"""What the image runs, without Docker: the builder stage's COPY and RUN steps are replayed
into a scratch "root filesystem" (a fresh venv, `pip install '.[serve]'` from a copy of
the build context), then the runtime stage's CMD and HEALTHCHECK, and the serving
``iabma`` commands, run against a real bundle with ``training`` absent.

The pip install takes about 30 s with a warm pip cache, so it happens once per session.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.deploy import (
    DOCKERIGNORE,
    DockerIgnore,
    Processes,
    Stage,
    clean_env,
    copy_instruction,
    exec_form,
    healthcheck,
    uvicorn_command,
    wait_until_ready,
    writable_store,
)
from tests.support.services import free_port

INSTANCE = {"x1": 0.1, "x2": -0.3}


@dataclass(frozen=True)
class Rootfs:
    """The image's paths, mapped under one scratch directory."""

    root: Path

    def host(self, image_path: str) -> Path:
        return self.root / image_path.lstrip("/")

    def rewrite(self, text: str, image_paths: tuple[str, ...]) -> str:
        pattern = "|".join(re.escape(p) for p in image_paths)
        return re.sub(
            rf"(?<![\w/])({pattern})(?=[/:\s'\"]|$)", lambda m: str(self.host(m[1])), text
        )


def builder_stage(stages: list[Stage]) -> tuple[Stage, str]:
    """The stage the runtime copies its venv from, and that venv's path."""
    for ins in stages[-1].all("COPY"):
        m = re.match(r"--from=(\S+)\s+(\S+)\s+(\S+)$", ins.args)
        if m:
            assert m[2] == m[3], "a venv only works at the path it was built at"
            (stage,) = [s for s in stages if s.name == m[1]]
            return stage, m[2]
    raise AssertionError("the runtime stage copies nothing from a builder")


@dataclass(frozen=True)
class ImageVenv:
    rootfs: Rootfs
    venv: Path
    image_paths: tuple[str, ...]


@pytest.fixture(scope="session")
def image_venv(
    dockerfile: list[Stage], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ImageVenv]:
    builder, venv_path = builder_stage(dockerfile)
    runtime_env = dockerfile[-1].env()
    image_paths = (venv_path, runtime_env["IABMA_STORE"], dockerfile[-1].last("WORKDIR").args)
    rootfs = Rootfs(tmp_path_factory.mktemp("rootfs"))
    # The base image's `python` is a plain interpreter, not this test run's venv.
    shim = rootfs.host("/usr/local/bin")
    shim.mkdir(parents=True)
    (shim / "python").symlink_to(getattr(sys, "_base_executable", sys.executable))
    env = clean_env(PATH=f"{shim}{os.pathsep}{os.environ['PATH']}")
    ignore = DockerIgnore.read(DOCKERIGNORE)
    workdir = rootfs.root
    for ins in builder.instructions:
        if ins.keyword == "ENV":
            for key, value in builder.env().items():
                value = rootfs.rewrite(value, image_paths)
                env[key] = value.replace("${PATH}", env["PATH"])
        elif ins.keyword == "WORKDIR":
            workdir = rootfs.host(ins.args)
            workdir.mkdir(parents=True, exist_ok=True)
        elif ins.keyword == "COPY":
            assert copy_instruction(ins.args, workdir, ignore), f"line {ins.line}: copied nothing"
        elif ins.keyword == "RUN":
            # The one deviation from the image: pip may use its cache here, to save a
            # minute per run; what gets installed is the same.
            command = rootfs.rewrite(ins.args, image_paths).replace(" --no-cache-dir", "")
            res = subprocess.run(
                ["sh", "-c", command], cwd=workdir, env=env,
                capture_output=True, text=True, timeout=600, check=False,
            )  # fmt: skip
            assert res.returncode == 0, f"RUN {ins.args}\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
    yield ImageVenv(rootfs, rootfs.host(venv_path), image_paths)
    shutil.rmtree(rootfs.root, ignore_errors=True)


def image_env(image: ImageVenv, stages: list[Stage], **extra: str) -> dict[str, str]:
    """The runtime stage's ENV, with image paths mapped and ${PATH} from this machine."""
    env = clean_env()
    for key, value in stages[-1].env().items():
        env[key] = image.rootfs.rewrite(value, image.image_paths).replace(
            "${PATH}", os.environ["PATH"]
        )
    env.update(extra)
    return env


def test_venv_has_the_serving_stack_and_no_training_stack(
    image_venv: ImageVenv, dockerfile: list[Stage]
) -> None:
    probe = (
        "import importlib.util as u, json\n"
        "names = ['torch', 'sklearn', 'scipy', 'pandas', 'xgboost', 'onnx', "
        "'onnxruntime', 'fastapi', 'uvicorn', 'sqlalchemy', 'psycopg', 'app', 'training', "
        "'pyarrow', 'adbc_driver_manager']\n"
        "found = {n: u.find_spec(n) is not None for n in names}\n"
        "import app.main, app.cli.main, sys\n"
        "print(json.dumps({'found': found, 'app': app.main.__file__, "
        "'torch_loaded': 'torch' in sys.modules}))\n"
    )
    workdir = image_venv.rootfs.host(dockerfile[-1].last("WORKDIR").args)
    workdir.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(
        [str(image_venv.venv / "bin" / "python"), "-c", probe], cwd=workdir,
        env=image_env(image_venv, dockerfile), capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    found = report["found"]
    absent_names = ("torch", "sklearn", "scipy", "pandas", "xgboost", "onnx", "training")
    # The archive's Parquet and Arrow stack is the `archive` extra's, not the server's.
    for absent in (*absent_names, "pyarrow", "adbc_driver_manager"):
        assert not found[absent], f"{absent} is installed in the serving image"
    for present in ("onnxruntime", "fastapi", "uvicorn", "sqlalchemy", "psycopg", "app"):
        assert found[present], f"{present} is missing from the serving image"
    # The code comes from the installed package, not from a source tree next to it.
    assert Path(report["app"]).is_relative_to(image_venv.venv), report["app"]
    assert report["torch_loaded"] is False


def test_cmd_and_healthcheck_serve_a_bundle(
    image_venv: ImageVenv, dockerfile: list[Stage], demo_store: Path, procs: Processes
) -> None:
    runtime = dockerfile[-1]
    rootfs = image_venv.rootfs
    # What `docker run -v models_store:/models_store:ro` and the image's mkdir provide.
    store = rootfs.host(runtime.env()["IABMA_STORE"])
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(demo_store, store)
    workdir = rootfs.host(runtime.last("WORKDIR").args)
    (workdir / "var").mkdir(parents=True, exist_ok=True)

    port = free_port()
    env = image_env(image_venv, dockerfile, IABMA_MODEL_NAME="demo")
    cmd = uvicorn_command(exec_form(runtime.last("CMD").args), "127.0.0.1", port)
    executable = shutil.which(cmd[0], path=env["PATH"])
    assert executable and Path(executable).is_relative_to(image_venv.venv), executable
    _, check = healthcheck(runtime.last("HEALTHCHECK").args)
    check = [c.replace("127.0.0.1:8000/", f"127.0.0.1:{port}/") for c in check]
    assert check != healthcheck(runtime.last("HEALTHCHECK").args)[1], "port not rewritten"

    def run_check() -> int:
        return subprocess.run(
            check, env=env, cwd=workdir, capture_output=True, timeout=30, check=False
        ).returncode

    assert run_check() != 0, "the HEALTHCHECK passes with no server running"

    server = procs.start("image-cmd", [executable, *cmd[1:]], env, cwd=workdir)
    ready = wait_until_ready(f"http://127.0.0.1:{port}/readyz", server)
    assert ready.json()["model"] == "demo"
    assert run_check() == 0, server.tail()

    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        r = client.post(
            "/predict", json={"instances": [INSTANCE]}, headers={"X-Request-ID": "image-cmd-1"}
        )
        assert r.status_code == 200, r.text
        assert r.headers["x-request-id"] == "image-cmd-1"
        body = r.json()
        assert body["model"] == "demo" and len(body["predictions"]) == 1
        assert client.get("/livez").status_code == 200
    # The default trail is a SQLite file in the image's one writable directory.
    assert (workdir / "var" / "audit.db").is_file()

    procs.signal(server, signal.SIGTERM)
    # uvicorn re-raises SIGTERM once it has shut down, so `docker stop` sees 143.
    assert server.popen.wait(timeout=30) in (0, -signal.SIGTERM), server.tail()
    assert "Application shutdown complete" in server.tail(), server.tail()
    assert run_check() != 0


def run_iabma(
    image: ImageVenv, stages: list[Stage], *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(image.venv / "bin" / "iabma"), *args], cwd=cwd, env=image_env(image, stages),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


SERVING = ("serve", "promote", "rollback", "audit-sums", "feedback")
TRAINING = ("train", "check", "bench", "refit")


def test_iabma_runs_the_serving_commands_and_names_what_training_needs(
    image_venv: ImageVenv, dockerfile: list[Stage], tmp_path: Path
) -> None:
    top = run_iabma(image_venv, dockerfile, "--help", cwd=tmp_path)
    assert top.returncode == 0, top.stderr
    for command in SERVING + TRAINING:
        assert command in top.stdout
    for command in SERVING:
        res = run_iabma(image_venv, dockerfile, command, "--help", cwd=tmp_path)
        assert res.returncode == 0 and "usage: iabma " + command in res.stdout, res.stderr
    for command in TRAINING:
        res = run_iabma(image_venv, dockerfile, command, "--dataset", "simulation", cwd=tmp_path)
        assert res.returncode == 2, res.stderr
        assert f"iabma {command}: error: needs the training side (training/)" in res.stderr
    trail = f"sqlite:///{tmp_path / 'audit.db'}"
    res = run_iabma(
        image_venv, dockerfile, "audit-archive", "--audit-url", trail, "--before",
        "2026-01-01T00:00:00Z", "--out", str(tmp_path / "archive"), cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "needs the `archive` extra" in res.stderr and "iabma[archive]" in res.stderr


def test_iabma_promotes_serves_posts_outcomes_rolls_back_and_sums_without_training(
    image_venv: ImageVenv, dockerfile: list[Stage], demo_store: Path, procs: Processes,
    tmp_path: Path,
) -> None:  # fmt: skip
    store, old, new = writable_store(demo_store, tmp_path / "store")
    promoted = run_iabma(
        image_venv, dockerfile, "promote", "--store", str(store), "--name", "demo", new,
        cwd=tmp_path,
    )  # fmt: skip
    assert promoted.returncode == 0, promoted.stderr
    assert promoted.stdout.strip() == f"demo: {old} -> {new}"

    port = free_port()
    argv = ["serve", "--store", str(store), "--name", "demo", "--port", str(port)]
    iabma = str(image_venv.venv / "bin" / "iabma")
    server = procs.start("image-iabma-serve", [iabma, *argv], image_env(image_venv, dockerfile),
                         cwd=tmp_path)  # fmt: skip
    ready = wait_until_ready(f"http://127.0.0.1:{port}/readyz", server)
    assert ready.json()["version"] == new
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        r = client.post("/predict", json={"instances": [INSTANCE]})
        assert r.status_code == 200 and r.json()["version"] == new, r.text
    outcomes = tmp_path / "outcomes.csv"
    outcomes.write_text(f"id,y\n{r.json()['request_id']},1\n")
    posted = run_iabma(
        image_venv, dockerfile, "feedback", "--url", f"http://127.0.0.1:{port}", "--csv",
        str(outcomes), "--id-column", "id", "--outcome-column", "y", cwd=tmp_path,
    )  # fmt: skip
    assert posted.returncode == 0 and "1 accepted" in posted.stdout, posted.stderr
    procs.signal(server, signal.SIGTERM)
    assert server.popen.wait(timeout=30) in (0, -signal.SIGTERM), server.tail()

    back = run_iabma(
        image_venv, dockerfile, "rollback", "--store", str(store), "--name", "demo", cwd=tmp_path
    )
    assert back.returncode == 0 and back.stdout.strip() == f"demo: {new} -> {old}", back.stderr
    trail = f"sqlite:///{tmp_path / 'var' / 'audit.db'}"
    sums = run_iabma(
        image_venv, dockerfile, "audit-sums", "--name", "demo", "--audit-url", trail,
        cwd=tmp_path,
    )  # fmt: skip
    assert sums.returncode == 0, sums.stderr
    assert "demo: 1 records to sum" in sums.stdout or "demo: 0 records to sum" in sums.stdout
