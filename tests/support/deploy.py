"""What the deployment tests share: reading the Dockerfile and .dockerignore, rendering the
nginx template the way the nginx image does, and starting and stopping real processes."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.services import wait_until_ok

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPOSE_FILE = REPO / "docker-compose.yml"
NGINX_TEMPLATE = REPO / "app" / "deploy" / "default.conf.template"


# --- Dockerfile ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str  # continuation lines joined, comments dropped
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"stage {self.name or self.base} has no {keyword}"
        return found[-1]

    def env(self) -> dict[str, str]:
        """ENV of this stage, later assignments winning, with $VAR/${VAR} expanded."""
        out: dict[str, str] = {}
        for ins in self.all("ENV"):
            for token in shlex.split(ins.args):
                key, sep, value = token.partition("=")
                assert sep, f"line {ins.line}: use the ENV key=value form"
                out[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: out.get(m[1], f"${{{m[1]}}}"), value)
        return out


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].strip())
            continue
        buf.append(stripped)
        yield start, " ".join(part for part in buf if part)
        buf = []
    assert not buf, "the Dockerfile ends inside a continued line"


def parse_dockerfile(text: str) -> list[Stage]:
    stages: list[Stage] = []
    for line, logical in _logical_lines(text):
        keyword, _, args = logical.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
            continue
        assert stages, f"line {line}: {keyword} before the first FROM"
        stages[-1].instructions.append(Instruction(keyword, args.strip(), line))
    return stages


def exec_form(args: str) -> list[str]:
    """The JSON (exec) form of CMD/ENTRYPOINT/HEALTHCHECK CMD, or an assertion error."""
    try:
        value = json.loads(args)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"not the JSON exec form: {args!r} ({exc})") from None
    assert isinstance(value, list) and value, f"not a JSON array: {args!r}"
    assert all(isinstance(v, str) for v in value), f"not an array of strings: {args!r}"
    return value


def healthcheck(args: str) -> tuple[dict[str, str], list[str]]:
    """(options, command) of ``HEALTHCHECK [--opt=value ...] CMD [...]``."""
    options: dict[str, str] = {}
    rest = args
    while rest.startswith("--"):
        option, _, rest = rest.partition(" ")
        key, _, value = option[2:].partition("=")
        options[key] = value
        rest = rest.strip()
    keyword, _, command = rest.partition(" ")
    assert keyword.upper() == "CMD", f"HEALTHCHECK needs CMD, got {args!r}"
    return options, exec_form(command.strip())


# --- .dockerignore -------------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out += pattern[i : end + 1]
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


@dataclass(frozen=True)
class DockerIgnore:
    """Docker's matching: last matching line wins, ``!`` re-includes, a directory's match
    covers everything under it."""

    rules: tuple[tuple[bool, re.Pattern[str]], ...]

    @classmethod
    def read(cls, path: Path) -> DockerIgnore:
        rules = []
        for raw in path.read_text(encoding="utf-8").splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pattern = line[1:].strip() if negate else line
            pattern = os.path.normpath(pattern.lstrip("/")).replace(os.sep, "/")
            rules.append((negate, _pattern_regex(pattern)))
        return cls(tuple(rules))

    def excluded(self, rel: str) -> bool:
        parts = rel.split("/")
        prefixes = ["/".join(parts[: k + 1]) for k in range(len(parts))]
        result = False
        for negate, regex in self.rules:
            if any(regex.match(p) for p in prefixes):
                result = not negate
        return result


def copy_instruction(args: str, workdir: Path, ignore: DockerIgnore) -> list[str]:
    """Carry out ``COPY src... dest`` from the repo into ``workdir`` as ``docker build``
    would, .dockerignore included; return the repo-relative paths copied."""
    words = [w for w in shlex.split(args) if not w.startswith("--")]
    assert len(words) >= 2, f"COPY {args}: needs a source and a destination"
    *sources, dest_text = words
    # An absolute destination is outside WORKDIR; replaying it here would write to the
    # host's own root. Our Dockerfile copies relative to WORKDIR only.
    assert not dest_text.startswith("/"), f"COPY {args}: give a destination relative to WORKDIR"
    dest = workdir / dest_text
    into_dir = dest_text.endswith("/") or len(sources) > 1
    copied: list[str] = []
    for src in sources:
        root = REPO / src
        assert root.exists(), f"COPY {src}: not in the build context"
        assert not ignore.excluded(src), f"COPY {src}: excluded by .dockerignore"
        if root.is_file():
            pairs = [(root, dest / root.name if into_dir else dest)]
        else:
            pairs = [(p, dest / p.relative_to(root)) for p in sorted(root.rglob("*"))]
        for path, target in pairs:
            rel = path.relative_to(REPO).as_posix()
            if not path.is_file() or ignore.excluded(rel):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            copied.append(rel)
    return copied


# --- nginx template ------------------------------------------------------------------------

TEMPLATE_VAR = re.compile(r"\$\{(\w+)\}|\$([A-Za-z_]\w*)")


def template_variables(text: str) -> tuple[set[str], set[str]]:
    """(``${UPPER}`` names for envsubst, ``$lower`` nginx variables) used in ``text``."""
    envs, nginx_vars = set(), set()
    for braced, bare in TEMPLATE_VAR.findall(text):
        (envs if braced else nginx_vars).add(braced or bare)
    return envs, nginx_vars


def render_template(text: str, env: Mapping[str, str]) -> str:
    """What the nginx image's 20-envsubst-on-templates.sh does: substitute ``$NAME`` and
    ``${NAME}`` for the variables that are set, and leave every other ``$word`` alone."""

    def sub(m: re.Match[str]) -> str:
        name = m[1] or m[2]
        return env[name] if name in env else m[0]

    return TEMPLATE_VAR.sub(sub, text)


def nginx_main_conf(prefix: Path, include: Path) -> str:
    """A main nginx.conf like the image's, with every path inside ``prefix``."""
    import pwd

    # nginx drops worker privileges to `user` only when started as root; running them as
    # the current user keeps the temp directories writable in both cases.
    user = pwd.getpwuid(os.geteuid()).pw_name
    temp = {k: prefix / k for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    for path in temp.values():
        path.mkdir(exist_ok=True)
    return f"""
user {user};
worker_processes 1;
pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} info;
events {{ worker_connections 512; }}
http {{
    default_type application/octet-stream;
    client_body_temp_path {temp["client_body"]};
    proxy_temp_path {temp["proxy"]};
    fastcgi_temp_path {temp["fastcgi"]};
    uwsgi_temp_path {temp["uwsgi"]};
    scgi_temp_path {temp["scgi"]};
    include {include};
}}
"""


# --- processes -----------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class Processes:
    """Every process a test starts, each in its own process group, all ended in teardown."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[Proc] = []

    def start(
        self, name: str, cmd: Sequence[str], env: Mapping[str, str], cwd: Path | None = None
    ) -> Proc:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                list(cmd),
                env=dict(env),
                cwd=cwd or self.workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    @staticmethod
    def signal(proc: Proc, sig: int) -> None:
        # The group is the one start_new_session made for this process, so nginx's workers
        # go with their master. It is only signalled while its leader is not yet reaped,
        # so the id cannot have been reused.
        if proc.popen.poll() is None:
            os.killpg(proc.popen.pid, sig)

    def stop(self, proc: Proc, timeout: float = 10.0) -> None:
        if proc.popen.poll() is None:
            self.signal(proc, signal.SIGTERM)
            try:
                proc.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(proc, signal.SIGKILL)
                proc.popen.wait(timeout)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)


def wait_until_ready(url: str, proc: Proc, timeout: float = 30.0) -> httpx.Response:
    def exited() -> str | None:
        code = proc.popen.poll()
        return None if code is None else f"{proc.name} exited with {code}:\n{proc.tail()}"

    return wait_until_ok(url, exited, timeout)


def clean_env(**extra: str) -> dict[str, str]:
    """A minimal environment, so that a developer's IABMA_* variables cannot leak in."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(extra)
    return env


def uvicorn_command(cmd: Sequence[str], host: str, port: int) -> list[str]:
    """The Dockerfile's CMD bound to ``host:port`` instead of 0.0.0.0:8000."""
    out = list(cmd)
    for flag, value in (("--host", host), ("--port", str(port))):
        assert flag in out, f"CMD has no {flag}: {cmd}"
        out[out.index(flag) + 1] = value
    return out


def writable_store(src: Path, dest: Path) -> tuple[Path, str, str]:
    """A copy of ``src`` with a second version of ``demo``; returns (store, old, new)."""
    shutil.copytree(src, dest)
    for p in dest.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    root = dest / "demo"
    old = (root / "LATEST").read_text().strip()
    new = "v-promoted"
    shutil.copytree(root / old, root / new)
    manifest = root / new / "manifest.json"
    data = json.loads(manifest.read_text())
    data["version"] = new
    manifest.write_text(json.dumps(data, indent=2))
    return dest, old, new
