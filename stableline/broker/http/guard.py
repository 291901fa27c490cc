"""aiohttp middleware: the HTTP admin answers 401 without a valid token, 403 when the
role may not.

What each path needs is a table: a subscription's own operations (list, create,
delete, reset, skip, peek, the entry at a position) and a topic's lastMessageId
and examinemessage need `consume` on the topic, as Pulsar's do (SUBSCRIBE,
UNSUBSCRIBE, RESET_CURSOR, SKIP, PEEK_MESSAGES, GET_SUBSCRIPTIONS are consume
rights there); a topic lookup (/lookup/v2/topic/...) needs produce or consume, as
Pulsar's LOOKUP does; everything else on the admin port is administration (topics,
stats, transactions, permissions, the dashboard) and needs a superuser role. A
path the table does not name needs a superuser: the guard fails closed. The
health probe and Prometheus' /metrics stay open, as Pulsar leaves them by
default; with `authenticate_metrics_endpoint` (Pulsar's name) /metrics needs a
valid token of any role, since it names every topic and subscription.
"""

from __future__ import annotations

import re

from aiohttp import web

from stableline.broker.security.caller import REQUEST_CALLER_KEY
from stableline.broker.security.guard import AuthenticationFailed, Guard, NotPermitted
from stableline.broker.security.permissions import Action
from stableline.topic_name import InvalidTopicNameError, TopicName

METRICS_PATH = "/metrics"
OPEN_PATHS = frozenset({"/admin/v2/brokers/health", METRICS_PATH, "/"})
# The dashboard's page and assets hold no data; the page asks for a token when the
# admin API it reads answers 401, and sends it with every call.
OPEN_PREFIXES = ("/dashboard/static/",)

_TOPIC = r"^/admin/v2/persistent/(?P<tenant>[^/]+)/(?P<namespace>[^/]+)/(?P<topic>[^/]+)"
_SUBSCRIPTION = _TOPIC + r"/subscription/[^/]+"
_LOOKUP = r"^/lookup/v2/topic/persistent/(?P<tenant>[^/]+)/(?P<namespace>[^/]+)/(?P<topic>[^/]+)"
# (methods, path) -> the action needed on the path's topic; the rest needs ADMIN.
TOPIC_RIGHTS: tuple[tuple[frozenset[str], re.Pattern[str], Action], ...] = tuple(
    (frozenset(methods), re.compile(pattern + "$"), action)
    for methods, pattern, action in (
        ({"GET"}, _TOPIC + "/subscriptions", Action.CONSUME),
        ({"PUT", "DELETE"}, _SUBSCRIPTION, Action.CONSUME),
        ({"POST"}, _SUBSCRIPTION + "/resetcursor(/[^/]+)?", Action.CONSUME),
        ({"POST"}, _SUBSCRIPTION + "/skip/[^/]+", Action.CONSUME),
        ({"POST"}, _SUBSCRIPTION + "/skip_all", Action.CONSUME),
        ({"GET"}, _SUBSCRIPTION + "/peek", Action.CONSUME),
        ({"GET"}, _SUBSCRIPTION + "/position/[^/]+", Action.CONSUME),
        ({"GET"}, _TOPIC + "/lastMessageId", Action.CONSUME),
        ({"GET"}, _TOPIC + "/examinemessage", Action.CONSUME),
        ({"GET"}, _LOOKUP, Action.LOOKUP),
    )
)


def required_right(method: str, path: str) -> tuple[Action, TopicName | None]:
    """What a request needs: an action on a topic from the table, else ADMIN."""
    for methods, pattern, action in TOPIC_RIGHTS:
        match = pattern.match(path)
        if match is not None and method in methods:
            try:
                topic = TopicName.parse(
                    "persistent://{tenant}/{namespace}/{topic}".format(**match.groupdict())
                )
            except InvalidTopicNameError:
                break  # a bad name is answered by the handler, to a superuser only
            return action, topic
    return Action.ADMIN, None


def auth_middleware(guard: Guard, authenticate_metrics: bool = False):
    assert guard.enabled

    @web.middleware
    async def authenticate_and_authorize(request: web.Request, handler):
        metrics_by_token = authenticate_metrics and request.path == METRICS_PATH
        if not metrics_by_token and (
            request.path in OPEN_PATHS or request.path.startswith(OPEN_PREFIXES)
        ):
            return await handler(request)
        try:
            role = guard.authenticate(request.headers.get("Authorization"))
        except AuthenticationFailed as error:
            return web.json_response(
                {"reason": str(error)}, status=401, headers={"WWW-Authenticate": "Bearer"}
            )
        if metrics_by_token:
            return await handler(request)  # any role: a scraper needs no grant
        try:
            guard.authorize(role, *required_right(request.method, request.path))
        except NotPermitted as error:
            return web.json_response({"reason": str(error)}, status=403)
        request[REQUEST_CALLER_KEY] = guard.caller(role)
        return await handler(request)

    return authenticate_and_authorize
