"""The dashboard: one static page whose script renders the JSON admin API.

`GET /` serves the page; its script and stylesheet are under /dashboard/static/.
Everything it shows comes from the admin API's JSON, polled by the page every
2 s, so the dashboard knows nothing the API does not say and needs no build step.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

STATIC_DIR = Path(__file__).parent / "static"
STATIC_PATH = "/dashboard/static"


def add_routes(app: web.Application) -> None:
    async def index(_request: web.Request) -> web.FileResponse:
        # no-cache: after an upgrade the page asks for the script it was shipped with.
        return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    app.router.add_get("/", index)
    app.router.add_static(STATIC_PATH, STATIC_DIR)
