"""The committed generated code matches proto/ (regenerate with `make proto`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_proto", ROOT / "scripts" / "dev" / "gen_proto.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_matches_the_proto_files(tmp_path):
    generator = _generator()
    fresh = {path.name: path for path in generator.generate(tmp_path)}
    committed = {path.name: path for path in generator.OUTPUT_DIR.iterdir() if path.is_file()}
    assert sorted(fresh) == sorted(committed), "generated file set differs: run `make proto`"
    for name, path in fresh.items():
        assert generator.normalized(path.read_text()) == generator.normalized(
            committed[name].read_text()
        ), f"{name} drifted from proto/: run `make proto` and commit the result"
