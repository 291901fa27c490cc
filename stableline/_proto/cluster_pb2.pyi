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

class ReplicaState(_message.Message):
    __slots__ = ("epoch", "ledger_id", "entry_count", "closed")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    ledger_id: int
    entry_count: int
    closed: bool
    def __init__(self, epoch: _Optional[int] = ..., ledger_id: _Optional[int] = ..., entry_count: _Optional[int] = ..., closed: _Optional[bool] = ...) -> None: ...

class ReplicateEntriesRequest(_message.Message):
    __slots__ = ("topic", "epoch", "ledger_id", "first_entry_id", "frames", "last_add_confirmed_ledger_id", "last_add_confirmed_entry_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    LAST_ADD_CONFIRMED_LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ADD_CONFIRMED_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    epoch: int
    ledger_id: int
    first_entry_id: int
    frames: _containers.RepeatedScalarFieldContainer[bytes]
    last_add_confirmed_ledger_id: int
    last_add_confirmed_entry_id: int
    def __init__(self, topic: _Optional[str] = ..., epoch: _Optional[int] = ..., ledger_id: _Optional[int] = ..., first_entry_id: _Optional[int] = ..., frames: _Optional[_Iterable[bytes]] = ..., last_add_confirmed_ledger_id: _Optional[int] = ..., last_add_confirmed_entry_id: _Optional[int] = ...) -> None: ...

class FenceReplicaRequest(_message.Message):
    __slots__ = ("topic", "epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    epoch: int
    def __init__(self, topic: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class ReadReplicaEntriesRequest(_message.Message):
    __slots__ = ("topic", "ledger_id", "first_entry_id", "max_entries", "max_bytes")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    ledger_id: int
    first_entry_id: int
    max_entries: int
    max_bytes: int
    def __init__(self, topic: _Optional[str] = ..., ledger_id: _Optional[int] = ..., first_entry_id: _Optional[int] = ..., max_entries: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReadReplicaEntriesResponse(_message.Message):
    __slots__ = ("frames",)
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    frames: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, frames: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ReplicateCursorsRequest(_message.Message):
    __slots__ = ("topic", "epoch", "states", "deleted")
    class StatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    epoch: int
    states: _containers.ScalarMap[str, bytes]
    deleted: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., epoch: _Optional[int] = ..., states: _Optional[_Mapping[str, bytes]] = ..., deleted: _Optional[_Iterable[str]] = ...) -> None: ...

class ReplicateCursorsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReadReplicaCursorsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class ReadReplicaCursorsResponse(_message.Message):
    __slots__ = ("states",)
    class StatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    STATES_FIELD_NUMBER: _ClassVar[int]
    states: _containers.ScalarMap[str, bytes]
    def __init__(self, states: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class ReplicateSnapshotRequest(_message.Message):
    __slots__ = ("topic", "epoch", "follows", "whole", "puts", "delete_prefixes")
    class PutsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FOLLOWS_FIELD_NUMBER: _ClassVar[int]
    WHOLE_FIELD_NUMBER: _ClassVar[int]
    PUTS_FIELD_NUMBER: _ClassVar[int]
    DELETE_PREFIXES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    epoch: int
    follows: bytes
    whole: bool
    puts: _containers.ScalarMap[str, bytes]
    delete_prefixes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., epoch: _Optional[int] = ..., follows: _Optional[bytes] = ..., whole: _Optional[bool] = ..., puts: _Optional[_Mapping[str, bytes]] = ..., delete_prefixes: _Optional[_Iterable[str]] = ...) -> None: ...

class ReplicateSnapshotResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TrimReplicaRequest(_message.Message):
    __slots__ = ("topic", "epoch", "below_ledger_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    BELOW_LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    epoch: int
    below_ledger_id: int
    def __init__(self, topic: _Optional[str] = ..., epoch: _Optional[int] = ..., below_ledger_id: _Optional[int] = ...) -> None: ...

class CloseReplicaLedgerRequest(_message.Message):
    __slots__ = ("topic", "epoch", "ledger_id", "last_entry_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    epoch: int
    ledger_id: int
    last_entry_id: int
    def __init__(self, topic: _Optional[str] = ..., epoch: _Optional[int] = ..., ledger_id: _Optional[int] = ..., last_entry_id: _Optional[int] = ...) -> None: ...

class GroupOffsetCommit(_message.Message):
    __slots__ = ("topic", "partition", "offset", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class CommitGroupOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "read_committed", "offsets")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    READ_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    read_committed: bool
    offsets: _containers.RepeatedCompositeFieldContainer[GroupOffsetCommit]
    def __init__(self, group_id: _Optional[str] = ..., read_committed: _Optional[bool] = ..., offsets: _Optional[_Iterable[_Union[GroupOffsetCommit, _Mapping]]] = ...) -> None: ...

class CommitGroupOffsetsResponse(_message.Message):
    __slots__ = ("error_codes",)
    ERROR_CODES_FIELD_NUMBER: _ClassVar[int]
    error_codes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error_codes: _Optional[_Iterable[int]] = ...) -> None: ...

class GroupPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class FetchGroupOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "partitions")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[GroupPartition]
    def __init__(self, group_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[GroupPartition, _Mapping]]] = ...) -> None: ...

class FetchedGroupOffset(_message.Message):
    __slots__ = ("offset", "metadata", "error_code")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    offset: int
    metadata: str
    error_code: int
    def __init__(self, offset: _Optional[int] = ..., metadata: _Optional[str] = ..., error_code: _Optional[int] = ...) -> None: ...

class FetchGroupOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[FetchedGroupOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[FetchedGroupOffset, _Mapping]]] = ...) -> None: ...

class GroupOffsetHold(_message.Message):
    __slots__ = ("topic", "partition", "offset", "held_from")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    HELD_FROM_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    held_from: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., held_from: _Optional[int] = ...) -> None: ...

class HoldGroupOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "read_committed", "txn_id", "holds")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    READ_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    read_committed: bool
    txn_id: _broker_pb2.TxnId
    holds: _containers.RepeatedCompositeFieldContainer[GroupOffsetHold]
    def __init__(self, group_id: _Optional[str] = ..., read_committed: _Optional[bool] = ..., txn_id: _Optional[_Union[_broker_pb2.TxnId, _Mapping]] = ..., holds: _Optional[_Iterable[_Union[GroupOffsetHold, _Mapping]]] = ...) -> None: ...

class HoldGroupOffsetsResponse(_message.Message):
    __slots__ = ("error_codes",)
    ERROR_CODES_FIELD_NUMBER: _ClassVar[int]
    error_codes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error_codes: _Optional[_Iterable[int]] = ...) -> None: ...
