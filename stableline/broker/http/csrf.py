"""aiohttp middleware: a call that changes state must show it was not sent by a form.

A page on another site, opened in an operator's browser, can make the browser send a
POST with no token (security off, the default) or with a cookie-free body the admin
API would accept (`skip_all`, a namespace policy) without any CORS check: HTML forms
and `fetch(..., {mode: "no-cors"})` send `text/plain`, form-encoded or multipart
bodies, or none. A browser sends `Content-Type: application/json` or a header of its
own across origins only after a CORS preflight, which this API never answers. So
every POST, PUT, PATCH and DELETE needs one of:

- `Content-Type: application/json` (what a JSON body is sent with), or
- the header `X-Stableline-Request` (any value; what the CLI sends on every call).

Otherwise: 415 when the request names another content type, 403 when it names none;
the body says what to send. GET, HEAD and OPTIONS change nothing and pass.
"""

from __future__ import annotations

from aiohttp import web

REQUEST_HEADER = "X-Stableline-Request"
STATE_CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_JSON = "application/json"


def _refusal(status: int, method: str, found: str) -> web.Response:
    return web.json_response(
        {
            "reason": (
                f"{method} changes state, so it needs Content-Type: {_JSON} or a "
                f"{REQUEST_HEADER} header (any value) ({found}); this keeps a page on "
                f"another site from sending it through a browser"
            )
        },
        status=status,
    )


def state_change_middleware():
    @web.middleware
    async def require_non_form_request(request: web.Request, handler):
        if request.method not in STATE_CHANGING_METHODS or REQUEST_HEADER in request.headers:
            return await handler(request)
        declared = request.headers.get("Content-Type")
        if declared is None:
            return _refusal(403, request.method, "it has neither")
        if request.content_type != _JSON:
            return _refusal(415, request.method, f"its Content-Type is {declared!r}")
        return await handler(request)

    return require_non_form_request
