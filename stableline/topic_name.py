"""Pulsar topic names: persistent://tenant/namespace/topic; a bare name is public/default."""

from __future__ import annotations

import re
from dataclasses import dataclass

_PART = re.compile(r"^[A-Za-z0-9_.=:-]+$")
_LOCAL = re.compile(r"^[A-Za-z0-9_.=:-]+$")
MAX_TOPIC_NAME_LENGTH = 255


class InvalidTopicNameError(ValueError):
    """The text is not a valid topic name; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class TopicName:
    tenant: str
    namespace: str
    local_name: str

    def __str__(self) -> str:
        return f"persistent://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def namespace_path(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def storage_name(self) -> str:
        """A file-system safe, unique name for the topic's directory."""
        return f"{self.tenant}/{self.namespace}/{self.local_name}"

    @classmethod
    def parse(cls, text: str) -> TopicName:
        if not isinstance(text, str) or not text:
            raise InvalidTopicNameError(
                "topic name is empty: use 'persistent://tenant/ns/topic' or 'topic'"
            )
        if len(text) > MAX_TOPIC_NAME_LENGTH:
            raise InvalidTopicNameError(
                f"topic name is {len(text)} characters; the limit is {MAX_TOPIC_NAME_LENGTH}"
            )
        rest = text
        if "://" in text:
            scheme, rest = text.split("://", 1)
            if scheme != "persistent":
                raise InvalidTopicNameError(
                    f"invalid topic name {text!r}: only persistent:// topics exist here"
                )
            parts = rest.split("/")
            if len(parts) != 3:
                raise InvalidTopicNameError(
                    f"invalid topic name {text!r}: expected persistent://tenant/namespace/topic"
                )
        else:
            parts = rest.split("/")
            if len(parts) == 1:
                parts = ["public", "default", parts[0]]
            elif len(parts) != 3:
                raise InvalidTopicNameError(
                    f"invalid topic name {text!r}: use 'topic' or 'tenant/namespace/topic'"
                )
        for part in parts:
            if not _PART.match(part) or part in (".", ".."):
                raise InvalidTopicNameError(
                    f"invalid topic name {text!r}: part {part!r} may only contain letters, "
                    "digits and _ . = : -"
                )
        return cls(*parts)
