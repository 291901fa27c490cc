"""What the admin API's path segments name: one reading of {tenant}/{namespace}/{topic}."""

from __future__ import annotations

from aiohttp import web

from stableline.topic_name import TopicName


def topic_name(request: web.Request) -> TopicName:
    """The persistent topic named by the request's {tenant}/{namespace}/{topic} segments."""
    info = request.match_info
    return TopicName.parse(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")


def namespace_path(request: web.Request) -> str:
    """The "tenant/namespace" named by the request's {tenant}/{namespace} segments,
    checked as a topic's are (InvalidTopicNameError)."""
    info = request.match_info
    return TopicName.parse(f"persistent://{info['tenant']}/{info['namespace']}/_").namespace_path
