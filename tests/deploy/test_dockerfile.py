"""The Dockerfile and .dockerignore, checked without a Docker engine: hadolint, and the
properties the deployment relies on, read from the parsed instructions."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

from tests.support.deploy import (
    DOCKERFILE,
    DOCKERIGNORE,
    REPO,
    DockerIgnore,
    Stage,
    exec_form,
    healthcheck,
)
from tests.support.services import require_tool

EXPECTED_CMD_START = ["python", "-m", "app.server"]


def hadolint(path: Path, tmp_path: Path) -> list[dict[str, object]]:
    # An explicit, empty config: a developer's ~/.config/hadolint.yaml cannot hide a rule.
    config = tmp_path / "hadolint.yaml"
    config.write_text("ignored: []\nfailure-threshold: style\n", encoding="utf-8")
    res = subprocess.run(
        [require_tool("hadolint"), "--config", str(config), "--format", "json", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert res.stderr.strip() == "", res.stderr
    findings = json.loads(res.stdout or "[]")
    assert (res.returncode == 0) == (not findings), (res.returncode, findings)
    return findings


def test_hadolint_reports_nothing(tmp_path: Path) -> None:
    findings = hadolint(DOCKERFILE, tmp_path)
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)


def test_hadolint_does_flag_a_careless_dockerfile(tmp_path: Path) -> None:
    # Guards the test above: an empty report must come from a working linter.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install fastapi\nCMD uvicorn app:app\n", encoding="utf-8")
    codes = {f["code"] for f in hadolint(bad, tmp_path)}
    assert {"DL3006", "DL3013", "DL3042", "DL3025"} <= codes, codes


def test_build_is_multi_stage_from_pinned_bases(dockerfile: list[Stage]) -> None:
    assert len(dockerfile) >= 2, "the runtime image must not carry the build stage"
    for stage in dockerfile:
        # An explicit version tag (or a digest), never an implicit or moving "latest".
        assert re.search(r"(:\d[\w.-]*|@sha256:[0-9a-f]{64})$", stage.base), stage.base
    builder_names = {s.name for s in dockerfile[:-1]}
    runtime = dockerfile[-1]
    froms = [re.search(r"--from=(\S+)", c.args) for c in runtime.all("COPY")]
    assert any(m and m[1] in builder_names for m in froms), "runtime copies nothing built"


def test_only_the_serve_extra_is_installed(dockerfile: list[Stage]) -> None:
    installs = [
        (stage, ins)
        for stage in dockerfile
        for ins in stage.all("RUN")
        if re.search(r"\bpip3?\s+install\b", ins.args)
    ]
    assert len(installs) == 1, [i.args for _, i in installs]
    stage, ins = installs[0]
    assert stage is not dockerfile[-1], "pip must run in the builder, not the runtime image"
    words = shlex.split(ins.args)
    targets = [w for w in words[words.index("install") + 1 :] if not w.startswith("-")]
    assert targets == [".[serve]"], targets
    assert "--no-cache-dir" in words
    assert "-e" not in words and "--editable" not in words, "the image needs no source tree"
    for other in dockerfile:
        for run in other.all("RUN"):
            assert not re.search(r"torch|scikit|sklearn|\[(train|dev)\]", run.args), run.args


def test_runtime_runs_as_a_non_root_user(dockerfile: list[Stage]) -> None:
    user = dockerfile[-1].last("USER").args
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, f"USER {user}: a numeric, non-root uid"
    assert not gid or (gid.isdigit() and int(gid) != 0), f"USER {user}: non-root gid"
    runs = " && ".join(r.args for r in dockerfile[-1].all("RUN"))
    useradd = re.search(r"useradd\b[^&;|]*--uid\s+(\d+)", runs)
    assert useradd and useradd[1] == uid, f"USER {user} is not the user the image creates"
    # Only the audit directory is handed to that user; the store stays read-only.
    owned = [
        path
        for m in re.finditer(r"\bchown\s+(?:-\S+\s+)*\S+\s+([^&;|]+)", runs)
        for path in m[1].split()
    ]
    assert owned == ["/app/var"], owned


def test_healthcheck_asks_readyz(dockerfile: list[Stage]) -> None:
    options, cmd = healthcheck(dockerfile[-1].last("HEALTHCHECK").args)
    assert cmd[0] == "python" and cmd[1] == "-c", cmd
    assert "http://127.0.0.1:8000/readyz" in cmd[2], cmd
    compile(cmd[2], "<healthcheck>", "exec")
    for key in ("interval", "timeout", "start-period", "retries"):
        assert key in options, f"HEALTHCHECK --{key} is left to Docker's default"


def test_cmd_runs_the_app_factory_behind_a_proxy(dockerfile: list[Stage]) -> None:
    runtime = dockerfile[-1]
    assert not runtime.all("ENTRYPOINT"), "CMD alone says what runs"
    cmd = exec_form(runtime.last("CMD").args)
    assert cmd[:3] == EXPECTED_CMD_START, cmd
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0" and cmd[cmd.index("--port") + 1] == "8000"
    assert "--proxy-headers" in cmd
    # Trusted proxies come from FORWARDED_ALLOW_IPS so compose can name nginx's address;
    # a hard-coded "*" would let any client forge its address.
    assert "--forwarded-allow-ips" not in cmd
    env = runtime.env()
    assert env.get("FORWARDED_ALLOW_IPS") and "*" not in env["FORWARDED_ALLOW_IPS"]
    assert env["PATH"].split(":")[0] == "/opt/venv/bin"
    assert env["IABMA_STORE"] == "/models_store"
    assert runtime.last("WORKDIR").args == "/app"
    assert int(cmd[cmd.index("--timeout-keep-alive") + 1]) > 30, "must outlast nginx's 30 s"


def test_dockerignore_keeps_state_out_and_sources_in(dockerfile: list[Stage]) -> None:
    ignore = DockerIgnore.read(DOCKERIGNORE)
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "models_store/demo/LATEST",
        "var/audit.db",
        "bench/results/serve_latency.json",
        ".pytest_cache/v/cache",
        "app/__pycache__/main.cpython-311.pyc",
        "training/x/__pycache__/y.pyc",
        "tests/conftest.py",
        "iabma.egg-info/PKG-INFO",
    ):
        assert ignore.excluded(path), f"{path} would be sent to the Docker daemon"
    copied = [
        w
        for ins in dockerfile[0].all("COPY")
        for w in shlex.split(ins.args)[:-1]
        if not w.startswith("--")
    ]
    assert copied, "the builder copies nothing"
    assert not any(src.rstrip("/") == "training" for src in copied), "the image copies training/"
    assert ignore.excluded("training/cli.py"), "training/ would be sent to the Docker daemon"
    for src in copied:
        assert not ignore.excluded(src), f"COPY {src}, but .dockerignore excludes it"
        root = REPO / src
        files = [root] if root.is_file() else [p for p in root.rglob("*.py")]
        kept = [p for p in files if not ignore.excluded(p.relative_to(REPO).as_posix())]
        assert kept, f"COPY {src}: every file in it is excluded"
