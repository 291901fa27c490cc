from stableline._proto import broker_pb2 as _broker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OnBehalfOf(_message.Message):
    __slots__ = ("checked", "role")
    CHECKED_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    checked: bool
    role: str
    def __init__(self, checked: _Optional[bool] = ..., role: _Optional[str] = ...) -> None: ...

class OpenTransactionRequest(_message.Message):
    __slots__ = ("coordinator_shard", "timeout_ms", "name", "owner", "client")
    COORDINATOR_SHARD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    coordinator_shard: int
    timeout_ms: int
    name: str
    owner: str
    client: str
    def __init__(self, coordinator_shard: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., name: _Optional[str] = ..., owner: _Optional[str] = ..., client: _Optional[str] = ...) -> None: ...

class AddTopicToTransactionRequest(_message.Message):
    __slots__ = ("txn_id", "topic", "caller")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    txn_id: _broker_pb2.TxnId
    topic: str
    caller: OnBehalfOf
    def __init__(self, txn_id: _Optional[_Union[_broker_pb2.TxnId, _Mapping]] = ..., topic: _Optional[str] = ..., caller: _Optional[_Union[OnBehalfOf, _Mapping]] = ...) -> None: ...

class AddTopicToTransactionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AckedMessage(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "batch_index")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    batch_index: int
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., batch_index: _Optional[int] = ...) -> None: ...

class AddAckToTransactionRequest(_message.Message):
    __slots__ = ("txn_id", "topic", "subscription", "messages", "caller", "check_only", "check_count")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    CHECK_ONLY_FIELD_NUMBER: _ClassVar[int]
    CHECK_COUNT_FIELD_NUMBER: _ClassVar[int]
    txn_id: _broker_pb2.TxnId
    topic: str
    subscription: str
    messages: _containers.RepeatedCompositeFieldContainer[AckedMessage]
    caller: OnBehalfOf
    check_only: bool
    check_count: int
    def __init__(self, txn_id: _Optional[_Union[_broker_pb2.TxnId, _Mapping]] = ..., topic: _Optional[str] = ..., subscription: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[AckedMessage, _Mapping]]] = ..., caller: _Optional[_Union[OnBehalfOf, _Mapping]] = ..., check_only: _Optional[bool] = ..., check_count: _Optional[int] = ...) -> None: ...

class AddAckToTransactionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EndTransactionOnTopicRequest(_message.Message):
    __slots__ = ("topic", "txn_id", "commit", "low_watermark")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    LOW_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    topic: str
    txn_id: _broker_pb2.TxnId
    commit: bool
    low_watermark: int
    def __init__(self, topic: _Optional[str] = ..., txn_id: _Optional[_Union[_broker_pb2.TxnId, _Mapping]] = ..., commit: _Optional[bool] = ..., low_watermark: _Optional[int] = ...) -> None: ...

class EndTransactionOnTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EndTransactionAcksRequest(_message.Message):
    __slots__ = ("topic", "subscription", "txn_id", "commit", "messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    txn_id: _broker_pb2.TxnId
    commit: bool
    messages: _containers.RepeatedCompositeFieldContainer[AckedMessage]
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., txn_id: _Optional[_Union[_broker_pb2.TxnId, _Mapping]] = ..., commit: _Optional[bool] = ..., messages: _Optional[_Iterable[_Union[AckedMessage, _Mapping]]] = ...) -> None: ...

class EndTransactionAcksResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
