"""How the HTTP admin reports errors: the status the error table gives the error's
stable code, with a JSON body `{"reason": "..."}`.

A topic (or a transaction's coordinator shard) owned by another broker is answered
with a redirect to the same request at the owner, as Pulsar answers it. Anything the
table calls Internal gets an id to look for in the broker's log, never its own text.
"""

from __future__ import annotations

import logging

from aiohttp import web

from stableline.broker.cluster.ownership import NotOwnerError
from stableline.broker.errors import INTERNAL, code_of, internal_error_message
from stableline.broker.txn.coordinator_errors import CoordinatorNotLeaderError
from stableline.error_codes import row_of

log = logging.getLogger(__name__)


def http_status(code: str) -> int:
    return row_of(code).http_status


def error_response(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


@web.middleware
async def errors(request: web.Request, handler):
    try:
        return await handler(request)
    except NotOwnerError as error:  # Pulsar's answer too: the same request, at the owner
        raise web.HTTPTemporaryRedirect(error.owner.http_url + request.path_qs) from None
    except CoordinatorNotLeaderError as error:  # a transaction of a shard led elsewhere
        raise web.HTTPTemporaryRedirect(error.leader_http_url + request.path_qs) from None
    except web.HTTPException:
        raise
    except Exception as error:
        code = code_of(error)
        if code == INTERNAL:  # the broker stays up; the caller gets an id to look for
            log.error("admin request %s failed", request.path)
            return error_response(http_status(code), internal_error_message(error))
        return error_response(http_status(code), str(error))
