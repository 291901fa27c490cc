"""The checks every face shares: who is calling (authentication), may they (authorization).

The gRPC interceptor, the HTTP middleware and the Kafka port's SASL are thin
adapters over `Guard`, so every port answers the same question the same way.
"""

from __future__ import annotations

import functools

from stableline.broker.errors import BrokerError
from stableline.broker.security.caller import Caller
from stableline.broker.security.permissions import Action, Authorizer
from stableline.broker.security.tokens import AuthenticationFailed, TokenVerifier, bearer_token
from stableline.topic_name import TopicName


class NotPermitted(BrokerError):
    """The role is known but may not do this; the message says how to allow it."""

    code = "NotAuthorized"


class Guard:
    def __init__(self, verifier: TokenVerifier | None, authorizer: Authorizer | None):
        # Authorization needs to know the role, so it never runs without authentication.
        assert authorizer is None or verifier is not None
        self.verifier = verifier
        self.authorizer = authorizer

    @property
    def enabled(self) -> bool:
        return self.verifier is not None

    def authenticate(self, authorization_header: str | None) -> str:
        """The caller's role; raises AuthenticationFailed."""
        assert self.verifier is not None, "authenticate() with authentication off"
        return self.verifier.role_of(bearer_token(authorization_header))

    def authenticate_token(self, token: str) -> tuple[str, float | None]:
        """A bare token's role and when it expires (None: never); raises
        AuthenticationFailed. For faces that carry no header (Kafka's SASL)."""
        assert self.verifier is not None, "authenticate_token() with authentication off"
        if not token:
            raise AuthenticationFailed("authentication is required: send a token")
        return self.verifier.role_of(token), self.verifier.expiry_of(token)

    def token_expiry(self, authorization_header: str | None) -> float | None:
        """When the caller's (already authenticated) token expires; None if never."""
        assert self.verifier is not None, "token_expiry() with authentication off"
        return self.verifier.expiry_of(bearer_token(authorization_header))

    def is_superuser(self, role: str) -> bool:
        """May `role` act on what other roles own? Every role may when authorization is off."""
        return self.authorizer is None or role in self.authorizer.superuser_roles

    def may_create_topic(self, role: str, topic: TopicName) -> bool:
        """May `role` create `topic` by using it first? Only with produce on it (or as a
        superuser) when authorization is on, so a consume-only role cannot fill the
        broker with topics; every role may when it is off."""
        return self.authorizer is None or self.authorizer.allows(role, Action.PRODUCE, topic)

    def caller(self, role: str) -> Caller:
        """The authenticated `role` as the services see it (caller.py)."""
        return Caller(role, self.is_superuser(role), functools.partial(self.may_create_topic, role))

    def authorize(self, role: str, action: Action, topic: TopicName | None = None) -> None:
        """Raises NotPermitted unless `role` may do `action` (on `topic`)."""
        if self.authorizer is None or self.authorizer.allows(role, action, topic):
            return
        if action is Action.ADMIN or topic is None:
            raise NotPermitted(
                f"role {role!r} may not administer the broker: only superuser roles may"
            )
        if action is Action.LOOKUP:
            raise NotPermitted(
                f"role {role!r} may not look up {topic}: that needs produce or consume on "
                f"it; a superuser can grant one with POST /admin/v2/namespaces/"
                f'{topic.namespace_path}/permissions/{role} ["consume"]'
            )
        raise NotPermitted(
            f"role {role!r} may not {action.value} on {topic}; a superuser can grant it with "
            f"POST /admin/v2/namespaces/{topic.namespace_path}/permissions/{role} "
            f'["{action.value}"]'
        )


__all__ = ["AuthenticationFailed", "Guard", "NotPermitted"]
