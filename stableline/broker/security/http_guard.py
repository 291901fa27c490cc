"""aiohttp middleware: the HTTP admin answers 401 without a valid token, 403 to non-admins.

Everything on the admin port is administration (topics, stats, transactions,
permissions, the dashboard), so it needs a superuser role once authorization is
on; the health probe and Prometheus' /metrics stay open, as Pulsar leaves them
by default.
"""

from __future__ import annotations

from aiohttp import web

from stableline.broker.security.guard import AuthenticationFailed, Guard, NotPermitted
from stableline.broker.security.permissions import Action

OPEN_PATHS = frozenset({"/admin/v2/brokers/health", "/metrics", "/"})
# The dashboard's page and assets hold no data; the page asks for a token when the
# admin API it reads answers 401, and sends it with every call.
OPEN_PREFIXES = ("/dashboard/static/",)


def auth_middleware(guard: Guard):
    assert guard.enabled

    @web.middleware
    async def authenticate_and_authorize(request: web.Request, handler):
        if request.path in OPEN_PATHS or request.path.startswith(OPEN_PREFIXES):
            return await handler(request)
        try:
            role = guard.authenticate(request.headers.get("Authorization"))
        except AuthenticationFailed as error:
            return web.json_response(
                {"reason": str(error)}, status=401, headers={"WWW-Authenticate": "Bearer"}
            )
        try:
            guard.authorize(role, Action.ADMIN)
        except NotPermitted as error:
            return web.json_response({"reason": str(error)}, status=403)
        return await handler(request)

    return authenticate_and_authorize
