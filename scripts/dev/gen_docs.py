"""Write the generated pages of docs/ (`make docs`): the configuration reference.

    python scripts/dev/gen_docs.py [--check]

--check writes nothing and exits 1 when a committed page differs from what it would
write (tests/test_docs.py runs the same comparison).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from stableline.broker import config_reference  # noqa: E402

CONFIG_PAGE = REPO / "docs" / "reference" / "configuration.md"


def serve_flags() -> dict[str, str]:
    """Each config key that `stableline serve` takes as a flag, with the flag. The
    command is found as the console script names it in pyproject.toml."""
    with open(REPO / "pyproject.toml", "rb") as handle:
        target = tomllib.load(handle)["project"]["scripts"]["stableline"]
    module_name, _, attribute = target.partition(":")
    serve = getattr(importlib.import_module(module_name), attribute).commands["serve"]
    keys = set(config_reference.all_key_names())
    return {param.name: param.opts[0] for param in serve.params if param.name in keys}


def pages() -> dict[Path, str]:
    """Each generated page and the text it should hold."""
    return {CONFIG_PAGE: config_reference.render(serve_flags())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args()
    stale = []
    for path, text in pages().items():
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    for path in stale:
        print(f"{path.relative_to(REPO)} is stale: run `make docs`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
