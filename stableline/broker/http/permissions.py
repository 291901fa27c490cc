"""Permission admin on Pulsar's paths: grant, list and revoke per namespace and per topic.

    GET    /admin/v2/namespaces/{tenant}/{namespace}/permissions
    POST   /admin/v2/namespaces/{tenant}/{namespace}/permissions/{role}   ["produce", ...]
    DELETE /admin/v2/namespaces/{tenant}/{namespace}/permissions/{role}
    GET    /admin/v2/persistent/{tenant}/{namespace}/{topic}/permissions
    POST   /admin/v2/persistent/{tenant}/{namespace}/{topic}/permissions/{role}
    DELETE /admin/v2/persistent/{tenant}/{namespace}/{topic}/permissions/{role}

A topic's GET answers what each role may do there, namespace grants included,
as Pulsar's does. A POST replaces the role's actions on that resource.
"""

from __future__ import annotations

import json

from aiohttp import web

from stableline.broker.security.permissions import (
    Action,
    InvalidPermissionError,
    PermissionStore,
    namespace_path,
    parse_actions,
)
from stableline.topic_name import TopicName


def _document(grants: dict[str, frozenset[Action]]) -> dict[str, list[str]]:
    return {role: sorted(a.value for a in actions) for role, actions in sorted(grants.items())}


def _refuse(error: Exception) -> web.Response:
    return web.json_response({"reason": str(error)}, status=400)


async def _actions(request: web.Request) -> frozenset[Action]:
    try:
        body = json.loads(await request.read() or b"null")
    except ValueError:
        raise InvalidPermissionError(
            'the body is not JSON: send a list of actions, e.g. ["produce", "consume"]'
        ) from None
    return parse_actions(body)


def add_permission_routes(app: web.Application, permissions: PermissionStore) -> None:
    def namespace(request: web.Request) -> str:
        info = request.match_info
        return namespace_path(info["tenant"], info["namespace"])

    def topic(request: web.Request) -> TopicName:
        info = request.match_info
        return TopicName.parse(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")

    async def namespace_permissions(request: web.Request) -> web.Response:
        try:
            return web.json_response(_document(permissions.namespace_grants(namespace(request))))
        except InvalidPermissionError as error:
            return _refuse(error)

    async def grant_namespace(request: web.Request) -> web.Response:
        try:
            await permissions.grant_namespace(
                namespace(request), request.match_info["role"], await _actions(request)
            )
        except InvalidPermissionError as error:
            return _refuse(error)
        return web.Response(status=204)

    async def revoke_namespace(request: web.Request) -> web.Response:
        try:
            await permissions.revoke_namespace(namespace(request), request.match_info["role"])
        except InvalidPermissionError as error:
            return _refuse(error)
        return web.Response(status=204)

    async def topic_permissions(request: web.Request) -> web.Response:
        return web.json_response(_document(permissions.effective_grants(topic(request))))

    async def grant_topic(request: web.Request) -> web.Response:
        try:
            await permissions.grant_topic(
                topic(request), request.match_info["role"], await _actions(request)
            )
        except InvalidPermissionError as error:
            return _refuse(error)
        return web.Response(status=204)

    async def revoke_topic(request: web.Request) -> web.Response:
        try:
            await permissions.revoke_topic(topic(request), request.match_info["role"])
        except InvalidPermissionError as error:
            return _refuse(error)
        return web.Response(status=204)

    namespaces = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
    app.router.add_get(namespaces, namespace_permissions)
    app.router.add_post(namespaces + "/{role}", grant_namespace)
    app.router.add_delete(namespaces + "/{role}", revoke_namespace)
    topics = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/permissions"
    app.router.add_get(topics, topic_permissions)
    app.router.add_post(topics + "/{role}", grant_topic)
    app.router.add_delete(topics + "/{role}", revoke_topic)
