"""Start one server of the plan (ours, the bare peer, MLServer or the ceiling) for one bundle."""

from __future__ import annotations

import http.client
import json
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers import mlserver, procs
from bench.peers.ours import READY_PATH, OursSettings, ours_command
from bench.peers.postgres import fresh_schema
from bench.speed.bundles import BundleCtx
from bench.speed.plan import ServerSpec

REPO = Path(__file__).resolve().parents[2]
GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"


@dataclass(frozen=True)
class Launched:
    spec: ServerSpec
    port: int
    pid: int
    cold_start_s: float
    paths: dict[str, str]  # route -> URL path
    formats: dict[str, str]  # route -> body format
    serves: str
    argv: list[str]
    env: dict[str, str]  # the server's own settings, for the record
    grpc_port: int | None = None  # ours: the OIP over gRPC


@contextmanager
def launch(
    spec: ServerSpec, b: BundleCtx, workdir: Path, create_mlserver_venv: bool
) -> Iterator[Launched]:
    port = procs.free_port()
    log = workdir / f"{spec.label.replace(' ', '_')}-{port}.log"
    with ExitStack() as stack:
        if spec.kind in ("ours", "baseline"):
            if spec.audit == "postgres":
                url = stack.enter_context(fresh_schema())
            else:
                url = f"sqlite:///{workdir / f'audit-{spec.bundle}-{port}.db'}"
            # A baseline checkout may lack the generated gRPC stubs; it serves REST only.
            grpc_port = procs.free_port() if spec.kind == "ours" else None
            store = Path(spec.store) if spec.store else b.store
            settings = OursSettings(store, b.name, spec.workers, spec.audit, url, grpc_port)
            argv, env = ours_command(settings, port)
            if spec.kind == "baseline":
                env["PYTHONPATH"] = spec.tree
            health = READY_PATH
            paths = {
                "predict": "/predict",
                "predict_prediction": "/predict",
                "columnar": "/predict",
                "oip": f"/v2/models/{b.name}/infer",
                "oip_binary": f"/v2/models/{b.name}/infer",
                "grpc": GRPC_INFER,
            }
            formats = {
                "predict": "native",
                "predict_prediction": "native_prediction",
                "columnar": "columnar",
                "oip": "oip",
                "oip_binary": "binary",
                "grpc": "grpc",
            }
            serves = f"{len(b.manifest['experts'])} experts + gate, audit {spec.audit}"
        elif spec.kind == "bare":
            argv = [
                str(Path(sys.executable).parent / "uvicorn"),
                "bench.peers.bare_fastapi:create_app",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(spec.workers),
                # Ours switches uvicorn's access log off too (it logs JSON lines itself);
                # left on, it costs ~75 us a request here, half a hello-world's throughput.
                "--no-access-log",
            ]
            env = dict(os.environ)
            env.update(BARE_BUNDLE_DIR=str(b.version_dir), BARE_EXPERT=b.peer_expert)
            health = "/healthz"
            paths, formats = {"predict": "/predict"}, {"predict": "native"}
            serves = f"expert {b.peer_expert} only (onnxruntime)"
        elif spec.kind == "ceiling":
            grpc_port = procs.free_port()
            argv = [sys.executable, "-m", "bench.peers.ceiling", str(port), str(grpc_port)]
            env = dict(os.environ)
            health = "/healthz"  # it answers every path
            paths = {"predict": "/", "grpc": GRPC_INFER}
            formats = {"predict": "native", "grpc": "grpc"}
            serves = "an empty ASGI app and a trivial gRPC handler: the stack's ceiling"
        else:
            mlserver.ensure_venv(create_mlserver_venv)
            if b.fit_X is None or b.fit_y is None:
                raise mlserver.MlserverUnavailable(
                    "the bundle has categorical features; MLServer's runtime takes one FP32 matrix"
                )
            model_dir = mlserver.prepare_model(
                workdir / spec.bundle, b.name, b.peer_expert, b.fit_X, b.fit_y
            )
            ports = [port, procs.free_port(), procs.free_port()]
            argv, env = mlserver.mlserver_command(model_dir, *ports)
            health = mlserver.READY_PATH
            paths, formats = {"oip": mlserver.INFER_PATH}, {"oip": "matrix"}
            serves = f"sklearn {b.peer_expert} refit (mlserver_sklearn, 1 worker, 1 thread)"
        # MLServer writes its .envs and metrics files to its working directory.
        cwd = REPO if spec.kind != "mlserver" else workdir / spec.bundle
        if spec.kind == "baseline":
            cwd = Path(spec.tree)  # uvicorn puts its working directory first on sys.path
        proc, cold = stack.enter_context(procs.server(argv, env, cwd, log, port, health))
        own = {
            k: v for k, v in env.items() if k.startswith(("IABMA_", "BARE_", "MLSERVER_", "OMP_"))
        }
        grpc = grpc_port if spec.kind in ("ours", "ceiling") else None
        yield Launched(spec, port, proc.pid, cold, paths, formats, serves, argv, own, grpc)


class PreflightError(RuntimeError):
    pass


def preflight(port: int, path: str, bodies: Path, fmt: str = "json") -> None:
    """One request by hand first: a wrong body shows up as a readable error, not a 0 req/s."""
    if fmt == "grpc":
        return preflight_grpc(port, path, bodies)
    headers = {"Content-Type": "application/json"}
    if fmt == "binary":  # frames.lua's first record
        with bodies.open("rb") as f:
            header_len, body_len = f.readline().split()
            body = f.read(int(body_len))
        headers = {"Inference-Header-Content-Length": header_len.decode()}
    else:
        with bodies.open("rb") as f:
            body = f.readline().rstrip(b"\n")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        text = resp.read()
    finally:
        conn.close()
    if not 200 <= resp.status < 300:
        raise PreflightError(f"POST {path} answered {resp.status}: {text[:500]!r}")
    if fmt == "binary":
        text = text[: int(resp.getheader("Inference-Header-Content-Length") or len(text))]
    try:
        json.loads(text)
    except ValueError:
        raise PreflightError(f"POST {path} answered {resp.status} but not JSON") from None


def preflight_grpc(port: int, path: str, body: Path) -> None:
    import grpc

    message = body.read_bytes()[5:]  # the file holds one framed message
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            channel.unary_unary(path)(message, timeout=60)
        except grpc.RpcError as exc:
            raise PreflightError(f"{path} answered {exc.code()}: {exc.details()}") from None


def grpc_calls_ok(srv: Launched) -> int:
    """Rows the server counted on its gRPC route: ours in ``iabma_predicted_rows_total``,
    the ceiling (one row a call) at ``GET /calls``."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request("GET", "/calls" if srv.spec.kind == "ceiling" else "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    if srv.spec.kind == "ceiling":
        return int(text)
    for line in text.splitlines():
        if line.startswith("iabma_predicted_rows_total{") and 'route="oip_grpc"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def rss(pid: int) -> dict[str, Any]:
    """VmRSS of one serving process (uvicorn worker, or the server itself) and all of them."""
    workers = procs.worker_pids(pid)
    tree = [pid, *procs.descendants(pid)]
    return {
        "worker": procs.rss_mb(workers[0]),
        "workers": [procs.rss_mb(p) for p in workers],
        "tree_total": round(sum(procs.rss_mb(p) or 0.0 for p in tree), 1),
    }
