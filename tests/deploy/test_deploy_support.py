"""The deploy tests' own tools, on small inputs whose results are known.

``deploy_support`` stands in for ``docker build`` (no engine here): it parses the
Dockerfile, matches ``.dockerignore``, carries out ``COPY`` and renders the nginx template
as the nginx image does. If it were wrong, the deploy tests would check the wrong thing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.deploy import (
    REPO,
    DockerIgnore,
    copy_instruction,
    exec_form,
    healthcheck,
    parse_dockerfile,
    render_template,
    template_variables,
    uvicorn_command,
)

SMALL = """\
# syntax=docker/dockerfile:1
FROM python:3.11-slim AS builder
ENV A=1 \\
    B=${A}/two
RUN pip install \\
    # a comment inside a continued line
    fastapi

FROM python:3.11-slim
ENV PATH=/opt/venv/bin:$PATH C=$B
COPY --from=builder /opt/venv /opt/venv
HEALTHCHECK --interval=10s --timeout=3s CMD ["python", "-c", "print(1)"]
CMD ["python", "-m", "app.server", "--host", "0.0.0.0", "--port", "8000"]
"""


def test_stages_instructions_and_continuations() -> None:
    builder, runtime = parse_dockerfile(SMALL)
    assert (builder.base, builder.name) == ("python:3.11-slim", "builder")
    assert (runtime.base, runtime.name) == ("python:3.11-slim", None)
    assert [i.keyword for i in builder.instructions] == ["ENV", "RUN"]
    assert builder.last("RUN").args == "pip install fastapi"
    assert builder.last("RUN").line == 5
    assert builder.env() == {"A": "1", "B": "1/two"}
    # Unknown variables stay as written, as Docker leaves them to the shell.
    assert runtime.env() == {"PATH": "/opt/venv/bin:${PATH}", "C": "${B}"}


def test_exec_forms_and_healthcheck_options() -> None:
    runtime = parse_dockerfile(SMALL)[-1]
    assert exec_form(runtime.last("CMD").args)[:3] == ["python", "-m", "app.server"]
    options, cmd = healthcheck(runtime.last("HEALTHCHECK").args)
    assert options == {"interval": "10s", "timeout": "3s"} and cmd == ["python", "-c", "print(1)"]
    with pytest.raises(AssertionError, match="not the JSON exec form"):
        exec_form("uvicorn app:app")
    with pytest.raises(AssertionError, match="not an array of strings"):
        exec_form('["a", 1]')


def test_broken_dockerfiles_are_refused() -> None:
    with pytest.raises(AssertionError, match="before the first FROM"):
        parse_dockerfile("RUN true\n")
    with pytest.raises(AssertionError, match="ends inside a continued line"):
        parse_dockerfile("FROM x\nRUN a \\\n")


def ignore(tmp_path: Path, text: str) -> DockerIgnore:
    f = tmp_path / ".dockerignore"
    f.write_text(text)
    return DockerIgnore.read(f)


@pytest.mark.parametrize(
    ("path", "excluded"),
    [
        ("models_store", True),  # a directory's match covers what is under it
        ("models_store/demo/LATEST", True),
        ("models_store/README.md", False),  # re-included by the later ! line
        ("app/__pycache__/x.pyc", True),  # **/ matches at any depth
        ("__pycache__/y.pyc", True),
        ("app/main.py", False),
        ("notes.md", True),
        ("README.md", False),  # ! after *.md
        ("a/b.md", False),  # * does not cross /
        ("x.tmp1", True),
        ("x.tmp12", False),  # ? is one character
    ],
)
def test_dockerignore_matching(tmp_path: Path, path: str, excluded: bool) -> None:
    rules = ignore(
        tmp_path,
        "# comment\nmodels_store\n!models_store/README.md\n**/__pycache__\n"
        "*.md\n!README.md\n/x.tmp?\n",
    )
    assert rules.excluded(path) is excluded


def test_copy_follows_docker_semantics(tmp_path: Path) -> None:
    rules = ignore(tmp_path, "**/__pycache__\n")
    work = tmp_path / "ctx"
    # One file to a directory (trailing slash), then a directory's contents.
    assert copy_instruction("pyproject.toml src/", work, rules) == ["pyproject.toml"]
    assert (work / "src" / "pyproject.toml").read_bytes() == (REPO / "pyproject.toml").read_bytes()
    copied = copy_instruction("--chown=1:1 app/bundle ./src/app/bundle", work, rules)
    assert "app/bundle/loader.py" in copied
    assert not [c for c in copied if "__pycache__" in c]
    assert (work / "src" / "app" / "bundle" / "loader.py").is_file()
    with pytest.raises(AssertionError, match="not in the build context"):
        copy_instruction("nope.txt src/", work, rules)
    with pytest.raises(AssertionError, match="excluded by .dockerignore"):
        copy_instruction("pyproject.toml x", work, ignore(tmp_path, "pyproject.toml\n"))
    with pytest.raises(AssertionError, match="relative to WORKDIR"):
        copy_instruction("pyproject.toml /etc/", work, rules)  # never the host's /etc


def test_template_rendering_leaves_nginx_variables_alone() -> None:
    text = "listen ${PORT}; proxy_pass http://$UP; set $x $remote_addr; ${UNSET}"
    assert template_variables(text) == ({"PORT", "UNSET"}, {"UP", "x", "remote_addr"})
    assert render_template(text, {"PORT": "80", "UP": "a:1"}) == (
        "listen 80; proxy_pass http://a:1; set $x $remote_addr; ${UNSET}"
    )


def test_uvicorn_command_rebinds_host_and_port() -> None:
    cmd = ["python", "-m", "app.server", "--host", "0.0.0.0", "--port", "8000", "--x"]
    assert uvicorn_command(cmd, "127.0.0.1", 9) == [
        "python", "-m", "app.server", "--host", "127.0.0.1", "--port", "9", "--x"
    ]  # fmt: skip
    with pytest.raises(AssertionError, match="CMD has no --port"):
        uvicorn_command(["python", "--host", "h"], "127.0.0.1", 9)
