"""The app as it is deployed: ``iabma serve`` and ``uvicorn --factory --workers 2``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import httpx

from tests.support.bundles import TEST_HASH_KEY, Bundles, assert_close, audited, pg_count
from tests.support.harness import PYTHON, ROOT, UvicornProcess
from tests.support.metrics import parse, total
from tests.support.services import wait_for

N = 40


async def _burst(url: str, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await asyncio.gather(
            *[
                client.post("/predict", json={"instances": [{"x1": k / n, "x2": -k / n}]})
                for k in range(n)
            ]
        )


def test_iabma_serve_with_the_default_sqlite_trail(bundles: Bundles, tmp_path: Path) -> None:
    cwd = tmp_path / "run"
    cwd.mkdir()

    def argv(port: int) -> list[str]:
        return [
            PYTHON, "-c", "import sys; from training.cli import main; sys.exit(main())",
            "serve", "--store", str(bundles.store), "--name", "demo", "--port", str(port),
        ]  # fmt: skip

    with UvicornProcess({}, cwd=cwd, argv=argv) as served:
        served.wait_ready()
        r = httpx.post(served.base_url + "/predict", json={"instances": [{"x1": 1.0, "x2": 0.0}]})
        assert r.status_code == 200, r.text
        rid = r.headers["x-request-id"]
        assert (
            httpx.get(served.base_url + "/weights", params={"request_id": rid}).status_code == 200
        )
        _, _, err = served.terminate()
    # The only thing the app writes is the audit SQLite file's directory.
    assert (
        sorted(p.relative_to(cwd).as_posix() for p in cwd.rglob("*") if p.is_file())[0]
        == "var/audit.db"
    )
    assert {p.relative_to(cwd).parts[0] for p in cwd.rglob("*")} == {"var"}
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    logged = [line for line in lines if line.get("request_id") == rid]
    assert logged and logged[0]["route"] == "/predict" and logged[0]["status"] == 200
    assert isinstance(logged[0]["latency_ms"], float)


def test_iabma_serve_takes_the_bundle_from_the_environment_unless_a_flag_names_one(
    bundles: Bundles, tmp_path: Path
) -> None:
    """As the container's settings do: IABMA_STORE and IABMA_MODEL_NAME, and a flag over
    them."""
    env = {"IABMA_STORE": str(bundles.store), "IABMA_MODEL_NAME": "credit"}
    served_names = []
    for flags in ([], ["--name", "demo"]):

        def argv(port: int, flags: list[str] = flags) -> list[str]:
            return [
                PYTHON, "-c", "import sys; from training.cli import main; sys.exit(main())",
                "serve", "--port", str(port), *flags,
            ]  # fmt: skip

        with UvicornProcess(env, cwd=tmp_path, argv=argv) as served:
            served.wait_ready()
            served_names.append(httpx.get(served.base_url + "/readyz").json()["model"])
    assert served_names == ["credit", "demo"]


def test_two_workers_share_one_postgres_trail(
    bundles: Bundles, pg_url: str, tmp_path: Path
) -> None:
    cwd = tmp_path / "empty"
    cwd.mkdir()
    env = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_URL": pg_url,
        "IABMA_AUDIT_HASH_KEY": TEST_HASH_KEY,
    }
    with UvicornProcess(env, ("--workers", "2"), cwd=cwd) as served:
        served.wait_ready()
        responses = asyncio.run(_burst(served.base_url, N))
        assert [r.status_code for r in responses] == [200] * N
        assert pg_count(pg_url) == N
        for r in responses[:5]:
            back = httpx.get(
                served.base_url + "/weights", params={"request_id": r.json()["request_id"]}
            )
            assert_close(back.json()["predictions"], audited(r.json()["predictions"]))
        page = httpx.get(served.base_url + "/weights", params={"limit": 1000}).json()
        assert page["aggregate"]["records"] == N

        def window_rows() -> float:
            samples, _ = parse(httpx.get(served.base_url + "/metrics").text)
            return total(samples, "iabma_weight_window_rows", expert="poly3")

        # Each worker shares its drift window within a second; any scrape adds up both.
        wait_for(lambda: window_rows() == N, 10, "both workers' drift windows")
        _, _, err = served.terminate()
    assert "Traceback" not in err, err
    assert list(cwd.iterdir()) == [], "with a PostgreSQL trail the app writes nothing locally"
    assert ROOT.is_dir()


def test_iabma_serve_refuses_several_workers_on_one_sqlite_trail(
    bundles: Bundles, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "training.cli",
            "serve",
            "--store",
            str(bundles.store),
            "--name",
            "demo",
            "--workers",
            "2",
            "--port",
            "1",
        ],
        cwd=ROOT,
        env={**os.environ, "IABMA_AUDIT_URL": f"sqlite:///{tmp_path / 'audit.db'}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"iabma serve: error: --workers 2 with a SQLite audit trail (sqlite:///{tmp_path}/audit.db)"
        ": SQLite serves one process. Run one worker, or give the workers one PostgreSQL trail "
        "(IABMA_AUDIT_URL=postgresql+psycopg://...)"
    ]


def test_uvicorn_workers_on_one_sqlite_trail_stop_with_one_line(
    bundles: Bundles, tmp_path: Path
) -> None:
    """The second worker cannot claim the trail; uvicorn then stops the whole server, and
    the log says why in one line (the 895 ms tails of two processes on one file are gone)."""
    env = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_URL": f"sqlite:///{tmp_path / 'audit.db'}",
    }
    with UvicornProcess(env, ("--workers", "2"), cwd=tmp_path) as served:
        served.proc.wait(timeout=60)
        _out, err = served.output()
    assert "Traceback" not in err, err
    refusals = [
        json.loads(line)["message"]
        for line in err.splitlines()
        if line.startswith("{") and "cannot start" in line
    ]
    assert len(refusals) == 1, err
    assert refusals[0].startswith(f"cannot start: the SQLite audit trail {tmp_path}/audit.db is")
    assert "PostgreSQL" in refusals[0]


def test_iabma_workers_setting_is_honoured_and_checked(bundles: Bundles, tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("IABMA_")},
        "IABMA_STORE": str(bundles.store),
        "IABMA_WORKERS": "3",
        "IABMA_AUDIT_URL": f"sqlite:///{tmp_path / 'audit.db'}",
    }
    proc = subprocess.run(
        [PYTHON, "-m", "app.server", "--port", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("iabma serve: error: IABMA_WORKERS=3 with a SQLite audit trail")


def test_every_line_a_two_worker_server_logs_is_json(bundles: Bundles, tmp_path: Path) -> None:
    """The supervisor of several workers never builds the app; its own lines (where it
    listens, its pid, the workers it starts and stops) are JSON lines too."""
    env = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_ENABLED": "false",
    }

    def argv(port: int) -> list[str]:
        return [PYTHON, "-m", "app.server", "--port", str(port), "--workers", "2"]

    with UvicornProcess(env, cwd=tmp_path, argv=argv) as served:
        served.wait_ready()
        r = httpx.post(served.base_url + "/predict", json={"instances": [{"x1": 1.0, "x2": 0.0}]})
        assert r.status_code == 200, r.text
        code, _, err = served.terminate()
    assert code == 0
    lines = [json.loads(line) for line in err.splitlines()]
    messages = [line["message"] for line in lines]
    assert any(m.startswith("Uvicorn running on http://127.0.0.1:") for m in messages), err
    assert any(m.startswith("Started parent process") for m in messages), err
    assert any(line.get("request_id") == r.headers["x-request-id"] for line in lines), err
