"""Opens a metadata store, writes one ephemeral key, says so, then waits to be killed.

python ephemeral_writer.py URL EMBEDDED_DIR PATH SESSION_TIMEOUT_S
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from stableline.metadata import open_metadata_store


async def main(url: str, embedded_dir: str, path: str, session_timeout_s: float) -> None:
    store = await open_metadata_store(
        url, embedded_dir=Path(embedded_dir), session_timeout_s=session_timeout_s
    )
    await store.put(path, b"held", -1, ephemeral=True)
    print("written", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
