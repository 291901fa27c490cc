from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ListTopicsRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class TopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("topic", "created")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    created: bool
    def __init__(self, topic: _Optional[str] = ..., created: _Optional[bool] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class TransactionRequest(_message.Message):
    __slots__ = ("most_bits", "least_bits")
    MOST_BITS_FIELD_NUMBER: _ClassVar[int]
    LEAST_BITS_FIELD_NUMBER: _ClassVar[int]
    most_bits: int
    least_bits: int
    def __init__(self, most_bits: _Optional[int] = ..., least_bits: _Optional[int] = ...) -> None: ...

class PartitionedTopicRequest(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[int] = ...) -> None: ...

class PartitionedTopicMetadata(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[int] = ...) -> None: ...

class DeletePartitionedTopicRequest(_message.Message):
    __slots__ = ("topic", "force")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    force: bool
    def __init__(self, topic: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class TransferTopicRequest(_message.Message):
    __slots__ = ("topic", "broker")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker: str
    def __init__(self, topic: _Optional[str] = ..., broker: _Optional[str] = ...) -> None: ...

class TransferTopicResponse(_message.Message):
    __slots__ = ("broker",)
    BROKER_FIELD_NUMBER: _ClassVar[int]
    broker: str
    def __init__(self, broker: _Optional[str] = ...) -> None: ...
