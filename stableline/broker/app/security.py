"""How security attaches to the broker: the gRPC port, the HTTP app, and their TLS."""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass

import grpc
from aiohttp import web

from stableline.broker.cluster.peer_credentials import peer_credentials
from stableline.broker.cluster.peers import PeerCredentials
from stableline.broker.config import BrokerConfig
from stableline.broker.grpc.guard import AuthInterceptor
from stableline.broker.grpc.open_streams import OpenStreams
from stableline.broker.http.guard import auth_middleware
from stableline.broker.http.permissions import add_permission_routes
from stableline.broker.security import tls
from stableline.broker.security.guard import Guard
from stableline.broker.security.permissions import Authorizer, PermissionStore
from stableline.broker.security.settings import SecuritySettings
from stableline.broker.security.tokens import TokenVerifier, read_secret_key

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokerSecurity:
    settings: SecuritySettings
    permissions: PermissionStore
    guard: Guard
    # Produce and Subscribe streams, re-checked on grant changes and token expiry.
    streams: OpenStreams

    @classmethod
    def open(cls, settings: SecuritySettings, permissions: PermissionStore) -> BrokerSecurity:
        """Security as `settings` say, checking grants kept by `permissions` (this
        broker's own, or the cluster's)."""
        verifier = None
        if settings.authentication_enabled:
            if settings.token_secret_key is not None:
                verifier = TokenVerifier(secret_key=read_secret_key(settings.token_secret_key))
            else:
                verifier = TokenVerifier(public_key=settings.token_public_key.read_bytes())
        authorizer = None
        if settings.authorization_enabled:
            authorizer = Authorizer(permissions, settings.superuser_roles)
        _describe(settings)
        guard = Guard(verifier, authorizer)
        streams = OpenStreams(guard, settings.authentication_refresh_check_seconds)
        permissions.change_listeners.append(streams.recheck_permissions)
        return cls(settings, permissions, guard, streams)

    def grpc_interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        return [AuthInterceptor(self.guard, self.streams)] if self.guard.enabled else []

    def add_grpc_port(self, server: grpc.aio.Server, address: str) -> int:
        if self.settings.tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, tls.grpc_server_credentials(self.settings.tls))

    def attach_http(self, app: web.Application) -> None:
        """Permission routes always; the token check when authentication is on."""
        add_permission_routes(app, self.permissions)
        if self.guard.enabled:
            app.middlewares.append(
                auth_middleware(self.guard, self.settings.authenticate_metrics_endpoint)
            )

    def peer_credentials(self, config: BrokerConfig) -> PeerCredentials:
        """How this broker calls its cluster's other brokers (peer_credentials.py)."""
        return peer_credentials(config, self.settings)

    def http_ssl_context(self) -> ssl.SSLContext | None:
        return None if self.settings.tls is None else tls.http_ssl_context(self.settings.tls)


def _describe(settings: SecuritySettings) -> None:
    """One line for operators on what is on, and a warning for a broker nobody can administer."""
    if settings.tls is None:
        transport = "plaintext"
    elif settings.tls.trust_certs_file is None:
        transport = "TLS"
    else:
        transport = "TLS with client certificates required"
    if not settings.authentication_enabled:
        log.info("security: %s, no authentication", transport)
        return
    algorithm = "HS256" if settings.token_secret_key is not None else "RS256"
    log.info(
        "security: %s, %s token authentication, authorization %s, superuser roles %s",
        transport,
        algorithm,
        "on" if settings.authorization_enabled else "off",
        ", ".join(settings.superuser_roles) or "none",
    )
    if settings.authorization_enabled and not settings.superuser_roles:
        log.warning("authorization is on with no superuser roles: nobody can grant permissions")
