"""The build step that makes the gRPC stubs, as a fresh clone or the Docker image runs it."""

from __future__ import annotations

import runpy
import subprocess
from pathlib import Path

from tests.support.harness import PYTHON, ROOT

METHODS = ["ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
           "ModelInfer"]  # fmt: skip


def test_setup_generates_every_stub(tmp_path: Path) -> None:
    generate = runpy.run_path(str(ROOT / "setup.py"), run_name="not_main")["generate_stubs"]
    written = sorted(Path(p).relative_to(tmp_path).as_posix() for p in generate(tmp_path))
    assert written == [
        "app/oip_grpc/grpc_service_pb2.py",
        "app/oip_grpc/grpc_service_pb2_grpc.py",
        "app/oip_grpc/health_pb2.py",
        "app/oip_grpc/health_pb2_grpc.py",
    ]
    assert all((tmp_path / p).stat().st_size > 0 for p in written)
    servicer = (tmp_path / "app/oip_grpc/grpc_service_pb2_grpc.py").read_text()
    assert all(f"/inference.GRPCInferenceService/{m}" in servicer for m in METHODS)


def test_installed_stubs_describe_the_protocol() -> None:
    # A child process: tritonclient's modules, imported by the other tests here, define the
    # same protobuf messages.
    code = (
        "from app.oip_grpc.stubs import pb, health_pb2\n"
        "s = pb.DESCRIPTOR.services_by_name['GRPCInferenceService']\n"
        "print(s.full_name, *[m.name for m in s.methods])\n"
        "print(health_pb2.DESCRIPTOR.services_by_name['Health'].full_name)\n"
        "f = pb.ModelInferRequest.DESCRIPTOR.fields_by_name['raw_input_contents'].number\n"
        "g = pb.ModelInferResponse.DESCRIPTOR.fields_by_name['raw_output_contents'].number\n"
        "print(f, g)\n"
    )
    out = subprocess.run([PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        " ".join(["inference.GRPCInferenceService", *METHODS]),
        "grpc.health.v1.Health",
        "7 6",
    ]
