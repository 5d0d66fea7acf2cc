"""The one build step pyproject.toml cannot declare: the gRPC stubs of ``app/oip_grpc``.

``build_py`` runs grpcio-tools' protoc (a build requirement in pyproject.toml) on each
``.proto`` there and writes ``*_pb2.py`` and ``*_pb2_grpc.py`` beside it: into the wheel for
``pip install .`` (the Docker image), and into the source tree for ``pip install -e .``
(a fresh clone's ``make``), where .gitignore keeps them out of git. Everything else about
the package is in pyproject.toml.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PROTO_DIR = "app/oip_grpc"


def generate_stubs(out: Path) -> list[str]:
    """Run protoc on every .proto of PROTO_DIR; return the files written, under ``out``."""
    import grpc_tools
    from grpc_tools import protoc

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    for proto in sorted((ROOT / PROTO_DIR).glob("*.proto")):
        rel = proto.relative_to(ROOT).as_posix()
        # Paths relative to ROOT make the generated imports ``from app.oip_grpc import ...``.
        argv = ["protoc", f"-I{ROOT}", f"-I{well_known}", f"--python_out={out}"]
        argv += [f"--grpc_python_out={out}", rel]
        if protoc.main(argv) != 0:
            raise RuntimeError(f"protoc failed on {rel}")
        stem = rel.removesuffix(".proto")
        written += [str(out / f"{stem}_pb2.py"), str(out / f"{stem}_pb2_grpc.py")]
    return written


class BuildPyWithStubs(build_py):
    def run(self) -> None:
        super().run()
        # Editable installs import the package from the source tree.
        out = ROOT if self.editable_mode else Path(self.build_lib)
        self._stubs = generate_stubs(out)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *getattr(self, "_stubs", [])]


# setuptools runs this file as __main__; tests import generate_stubs without building.
if __name__ == "__main__":
    setup(cmdclass={"build_py": BuildPyWithStubs})
