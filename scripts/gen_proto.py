"""Generate the Python protobuf/gRPC code for proto/durable_rpc/v1 into python/durable_rpc/v1.

    python scripts/gen_proto.py           # regenerate in place
    python scripts/gen_proto.py --check   # exit 1 if the checked-in code is out of date

The target package holds generated code only. Message modules come with mypy-protobuf
stubs; every *service.proto file gets gRPC stubs.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from google.rpc import status_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE = Path("durable_rpc") / "v1"
TARGET = ROOT / "python" / PACKAGE
INIT = '"""Generated protobuf and gRPC code for durable_rpc.v1. Do not edit."""\n'


def generate(out: Path) -> None:
    protos = sorted((PROTO_ROOT / PACKAGE).glob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    # google/rpc/status.proto ships with googleapis-common-protos.
    googleapis = str(Path(status_pb2.__file__).resolve().parents[2])
    base = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"-I{googleapis}"]
    names = [str(p.relative_to(PROTO_ROOT)) for p in protos]
    if protoc.main([*base, f"--python_out={out}", f"--mypy_out={out}", *names]) != 0:
        raise SystemExit("protoc failed on the message files")
    services = [n for n in names if n.endswith("service.proto")]
    if protoc.main([*base, f"--grpc_python_out={out}", f"--mypy_grpc_out={out}", *services]):
        raise SystemExit("protoc failed on the service files")
    (out / PACKAGE / "__init__.py").write_text(INIT)
    (out / PACKAGE / "py.typed").write_text("")


def differences(expected: Path, actual: Path) -> list[str]:
    exp = {p.name for p in expected.iterdir() if p.is_file()}
    act = {p.name for p in actual.iterdir() if p.is_file()} if actual.exists() else set()
    diff = sorted(exp ^ act)
    diff += sorted(n for n in exp & act if not filecmp.cmp(expected / n, actual / n, shallow=False))
    return diff


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if generated code is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generate(out)
        fresh = out / PACKAGE
        if args.check:
            stale = differences(fresh, TARGET)
            if stale:
                print("generated protobuf code is out of date:", ", ".join(stale))
                print("run: python scripts/gen_proto.py")
                return 1
            print("generated protobuf code is up to date")
            return 0
        if TARGET.exists():
            shutil.rmtree(TARGET)
        shutil.copytree(fresh, TARGET)
    print(f"generated {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
