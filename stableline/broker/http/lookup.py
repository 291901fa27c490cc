"""Pulsar's HTTP topic lookup:

    GET /lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}

answers Pulsar's LookupData document naming the broker that serves the topic
(lookup.py decides which, and when a missing topic is answered 404):

    {"brokerUrl": "stableline://host:6650", "brokerUrlTls": null,
     "httpUrl": "http://host:8080", "httpUrlTls": null,
     "nativeUrl": "stableline://host:6650"}

The URLs are in the form the client's service URL takes. One port serves either
plaintext or TLS, so of brokerUrl / brokerUrlTls (and httpUrl / httpUrlTls) the one
the broker does not serve is null, as Pulsar leaves a listener it does not have;
nativeUrl is the binary protocol's URL that does serve. The right needed is
produce or consume on the topic (http_guard.py), and the caller's role decides
whether a missing topic would be created (REQUEST_CALLER_KEY).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from stableline.broker.cluster.lookup import BrokerAddresses, TopicLookup
from stableline.broker.http.paths import topic_name
from stableline.broker.security.caller import REQUEST_CALLER_KEY

PATH = "/lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}"


def lookup_data(broker: BrokerAddresses) -> dict[str, Any]:
    """Pulsar's LookupData fields for a broker."""
    return {
        "brokerUrl": None if broker.tls else broker.service_url,
        "brokerUrlTls": broker.service_url if broker.tls else None,
        "httpUrl": None if broker.tls else broker.http_url,
        "httpUrlTls": broker.http_url if broker.tls else None,
        "nativeUrl": broker.service_url,
    }


def add_routes(app: web.Application, lookup: TopicLookup) -> None:
    async def lookup_topic(request: web.Request) -> web.Response:
        owner = await lookup.owner(topic_name(request), request.get(REQUEST_CALLER_KEY))
        return web.json_response(lookup_data(owner.broker))

    app.router.add_get(PATH, lookup_topic)
