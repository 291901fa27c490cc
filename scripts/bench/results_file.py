"""The end of a benchmark script's run: its total time, and its figures as JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path


def finish(result: dict, started: float, json_path: Path | None) -> int:
    """Add total_seconds (since `started`, a perf_counter), print it, and write the
    result to json_path when given; the script's exit code."""
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    print(f"total {result['total_seconds']} s")
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {json_path}")
    return 0
