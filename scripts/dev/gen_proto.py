"""Generate stableline/_proto from proto/stableline/v1/*.proto.

The generated modules are committed; tests/test_proto_drift.py regenerates them
into a temporary directory and fails when they differ from the committed ones.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
OUTPUT_DIR = ROOT / "stableline" / "_proto"

# Lines that only name the generator's version: a newer grpcio-tools must not
# count as drift of our .proto files.
VERSION_LINE = re.compile(
    r"(Protobuf Python Version|ValidateProtobufRuntimeVersion|GRPC_GENERATED_VERSION|^\s*\d+,\s*$|^\s*'',\s*$|^\s*\d+\s*,?\s*$)"
)


def proto_files() -> list[Path]:
    return sorted((PROTO_DIR / "stableline" / "v1").glob("*.proto"))


def generate(output_dir: Path) -> list[Path]:
    """Run protoc into output_dir and rewrite imports to the stableline._proto package."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as raw:
        args = [
            "protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={raw}",
            f"--pyi_out={raw}",
            f"--grpc_python_out={raw}",
            *[str(p) for p in proto_files()],
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        output_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for generated in sorted((Path(raw) / "stableline" / "v1").iterdir()):
            text = generated.read_text()
            text = text.replace("from stableline.v1 import", "from stableline._proto import")
            target = output_dir / generated.name
            target.write_text(text)
            written.append(target)
        init = output_dir / "__init__.py"
        init.write_text(
            '"""Generated protobuf and gRPC modules; do not edit (scripts/gen_proto.py)."""\n'
        )
        written.append(init)
        return written


def normalized(text: str) -> list[str]:
    return [line for line in text.splitlines() if not VERSION_LINE.search(line)]


if __name__ == "__main__":
    for path in generate(OUTPUT_DIR):
        print(f"wrote {path.relative_to(ROOT)}")
    sys.exit(0)
