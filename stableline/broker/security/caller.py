"""Who is calling the current RPC, as the gRPC guard established it.

The guard authenticates and authorizes before the service runs; the service needs
the role too, to tell what belongs to whom (a transaction is its opener's, a producer
name its connected producer's). A context variable carries it from the interceptor
into the handler: set once per RPC, before the handler runs, in the RPC's own task
(and so in the tasks the handler starts); RPCs never see each other's caller.
Unset (None) when authentication is off: every caller is anonymous. An HTTP
request carries its caller under REQUEST_CALLER_KEY, set by the HTTP guard.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from stableline.broker.topics.namespace_policies import AutoTopicCreation
from stableline.topic_name import TopicName


@dataclass(frozen=True, slots=True)
class Caller:
    role: str
    # May act on what other roles own (a superuser role, or any role with authorization off).
    superuser: bool
    # May this role create a topic by using it first (Guard.may_create_topic)?
    may_create_topic: Callable[[TopicName], bool] = field(
        default=lambda _topic: True, compare=False, repr=False
    )

    @property
    def checked_as(self) -> str | None:
        """The role ownership is checked against; None when nothing is checked."""
        return None if self.superuser else self.role


CURRENT_CALLER: ContextVar[Caller | None] = ContextVar("stableline_caller", default=None)
# Where an HTTP request holds its Caller (absent when authentication is off).
REQUEST_CALLER_KEY = "stableline.caller"


def may_create_on_first_use(
    caller: Caller | None,
    topic: TopicName,
    allow_auto_topic_creation: bool,
    policy: AutoTopicCreation | None = None,
) -> bool:
    """Would a Produce or Subscribe of `caller` naming `topic` create it if missing?
    Without a namespace policy: anyone with authentication off or
    `allow_auto_topic_creation`, otherwise only a role that may create it
    (Guard.may_create_topic: produce on it). The topic's namespace policy, when set,
    decides instead: disabled, no one; enabled, anyone with authentication off,
    otherwise only a role that may create it."""
    if policy is None:
        return caller is None or allow_auto_topic_creation or caller.may_create_topic(topic)
    return policy.allowed and (caller is None or caller.may_create_topic(topic))


def not_created_on_first_use(
    caller: Caller | None, topic: TopicName, policy: AutoTopicCreation | None
) -> str:
    """Why a missing `topic` is not created by `caller`'s first use, and what to do."""
    create = f"PUT /admin/v2/persistent/{topic.namespace_path}/{topic.local_name}"
    if policy is not None and not policy.allowed:
        return (
            f"topic {topic} does not exist, and namespace {topic.namespace_path} creates no "
            f"topic on first use (its auto topic creation policy is disabled): an admin "
            f"creates it ({create}) or enables the policy "
            f"(POST /admin/v2/namespaces/{topic.namespace_path}/autoTopicCreation)"
        )
    assert caller is not None  # an anonymous caller's first use creates the rest
    return (
        f"topic {topic} does not exist, and role {caller.role!r} may not create it: "
        f"a role with produce on it creates it on first use, or an admin creates it ({create})"
    )
