"""Namespace policies on Pulsar's paths (superusers only, as every admin path not
granted per topic):

    GET    /admin/v2/namespaces/{tenant}/{namespace}                    its policies
    GET    /admin/v2/namespaces/{tenant}/{namespace}/autoTopicCreation  the override, or null
    POST   /admin/v2/namespaces/{tenant}/{namespace}/autoTopicCreation
           {"allowAutoTopicCreation": true, "topicType": "non-partitioned"}
    DELETE /admin/v2/namespaces/{tenant}/{namespace}/autoTopicCreation  back to the default
    GET    /admin/v2/namespaces/{tenant}/{namespace}/persistence        the policy, or null
    POST   /admin/v2/namespaces/{tenant}/{namespace}/persistence
           {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2}
    DELETE /admin/v2/namespaces/{tenant}/{namespace}/persistence        back to the default

A policy may be set before the namespace has a topic (so its first topic already
follows it). A bad body is answered 400, naming the rule it breaks, and changes
nothing. A persistence policy applies to topics placed from then on; those placed
before keep the ensemble they were placed with.
"""

from __future__ import annotations

import json

from aiohttp import web

from stableline.broker.http.paths import namespace_path
from stableline.broker.topics.namespace_policies import AutoTopicCreation, InvalidPolicyError
from stableline.broker.topics.persistence import InvalidPersistenceError, PersistencePolicy
from stableline.broker.topics.registry import TopicRegistry


def add_routes(app: web.Application, registry: TopicRegistry) -> None:
    policies = registry.namespace_policies

    def override(namespace: str) -> dict[str, object] | None:
        policy = policies.auto_topic_creation(namespace)
        return policy.to_json() if policy is not None else None

    def persistence(namespace: str) -> dict[str, int] | None:
        policy = policies.persistence(namespace)
        return policy.to_json() if policy is not None else None

    async def namespace_policies(request: web.Request) -> web.Response:
        namespace = namespace_path(request)
        return web.json_response(
            {
                "autoTopicCreationOverride": override(namespace),
                "persistence": persistence(namespace),
                # Pulsar's policy of that name; here the broker's config (0: unlimited).
                "max_topics_per_namespace": registry.config.max_topics_per_namespace,
                "topics": registry.topics_in(namespace),  # how many it holds now
            }
        )

    async def get_auto_topic_creation(request: web.Request) -> web.Response:
        return web.json_response(override(namespace_path(request)))

    async def set_auto_topic_creation(request: web.Request) -> web.Response:
        namespace = namespace_path(request)
        try:
            policy = AutoTopicCreation.from_json(json.loads(await request.read() or b"null"))
        except InvalidPolicyError as error:
            return web.json_response({"reason": str(error)}, status=400)
        except ValueError:
            return web.json_response({"reason": "the body is not JSON"}, status=400)
        await policies.set_auto_topic_creation(namespace, policy)
        return web.Response(status=204)

    async def remove_auto_topic_creation(request: web.Request) -> web.Response:
        await policies.remove_auto_topic_creation(namespace_path(request))
        return web.Response(status=204)

    async def get_persistence(request: web.Request) -> web.Response:
        return web.json_response(persistence(namespace_path(request)))

    async def set_persistence(request: web.Request) -> web.Response:
        namespace = namespace_path(request)
        try:
            policy = PersistencePolicy.from_json(json.loads(await request.read() or b"null"))
        except InvalidPersistenceError as error:
            return web.json_response({"reason": str(error)}, status=400)
        except ValueError:
            return web.json_response({"reason": "the body is not JSON"}, status=400)
        await policies.set_persistence(namespace, policy)
        return web.Response(status=204)

    async def remove_persistence(request: web.Request) -> web.Response:
        await policies.remove_persistence(namespace_path(request))
        return web.Response(status=204)

    namespace = "/admin/v2/namespaces/{tenant}/{namespace}"
    app.router.add_get(namespace, namespace_policies)
    app.router.add_get(namespace + "/autoTopicCreation", get_auto_topic_creation)
    app.router.add_post(namespace + "/autoTopicCreation", set_auto_topic_creation)
    app.router.add_delete(namespace + "/autoTopicCreation", remove_auto_topic_creation)
    app.router.add_get(namespace + "/persistence", get_persistence)
    app.router.add_post(namespace + "/persistence", set_persistence)
    app.router.add_delete(namespace + "/persistence", remove_persistence)
