"""The `stableline` command line: serve, produce, consume, admin, cluster, perf."""

from stableline.cli.main import main

__all__ = ["main"]
