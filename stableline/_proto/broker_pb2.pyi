from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EntryType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENTRY_TYPE_DATA: _ClassVar[EntryType]
    ENTRY_TYPE_TXN_COMMIT: _ClassVar[EntryType]
    ENTRY_TYPE_TXN_ABORT: _ClassVar[EntryType]

class SubscriptionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUBSCRIPTION_TYPE_EXCLUSIVE: _ClassVar[SubscriptionType]
    SUBSCRIPTION_TYPE_SHARED: _ClassVar[SubscriptionType]
    SUBSCRIPTION_TYPE_FAILOVER: _ClassVar[SubscriptionType]
    SUBSCRIPTION_TYPE_KEY_SHARED: _ClassVar[SubscriptionType]

class InitialPosition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INITIAL_POSITION_LATEST: _ClassVar[InitialPosition]
    INITIAL_POSITION_EARLIEST: _ClassVar[InitialPosition]

class IsolationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ISOLATION_LEVEL_READ_COMMITTED: _ClassVar[IsolationLevel]
    ISOLATION_LEVEL_READ_UNCOMMITTED: _ClassVar[IsolationLevel]

class KeySharedMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KEY_SHARED_MODE_AUTO_SPLIT: _ClassVar[KeySharedMode]
    KEY_SHARED_MODE_STICKY: _ClassVar[KeySharedMode]

class LookupAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOOKUP_ACTION_CONNECT: _ClassVar[LookupAction]

class TxnAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TXN_ACTION_COMMIT: _ClassVar[TxnAction]
    TXN_ACTION_ABORT: _ClassVar[TxnAction]

class TxnState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TXN_STATE_UNSPECIFIED: _ClassVar[TxnState]
    TXN_STATE_OPEN: _ClassVar[TxnState]
    TXN_STATE_COMMITTING: _ClassVar[TxnState]
    TXN_STATE_COMMITTED: _ClassVar[TxnState]
    TXN_STATE_ABORTING: _ClassVar[TxnState]
    TXN_STATE_TIMEOUT: _ClassVar[TxnState]
    TXN_STATE_ABORTED: _ClassVar[TxnState]
ENTRY_TYPE_DATA: EntryType
ENTRY_TYPE_TXN_COMMIT: EntryType
ENTRY_TYPE_TXN_ABORT: EntryType
SUBSCRIPTION_TYPE_EXCLUSIVE: SubscriptionType
SUBSCRIPTION_TYPE_SHARED: SubscriptionType
SUBSCRIPTION_TYPE_FAILOVER: SubscriptionType
SUBSCRIPTION_TYPE_KEY_SHARED: SubscriptionType
INITIAL_POSITION_LATEST: InitialPosition
INITIAL_POSITION_EARLIEST: InitialPosition
ISOLATION_LEVEL_READ_COMMITTED: IsolationLevel
ISOLATION_LEVEL_READ_UNCOMMITTED: IsolationLevel
KEY_SHARED_MODE_AUTO_SPLIT: KeySharedMode
KEY_SHARED_MODE_STICKY: KeySharedMode
LOOKUP_ACTION_CONNECT: LookupAction
TXN_ACTION_COMMIT: TxnAction
TXN_ACTION_ABORT: TxnAction
TXN_STATE_UNSPECIFIED: TxnState
TXN_STATE_OPEN: TxnState
TXN_STATE_COMMITTING: TxnState
TXN_STATE_COMMITTED: TxnState
TXN_STATE_ABORTING: TxnState
TXN_STATE_TIMEOUT: TxnState
TXN_STATE_ABORTED: TxnState

class TxnId(_message.Message):
    __slots__ = ("most_bits", "least_bits")
    MOST_BITS_FIELD_NUMBER: _ClassVar[int]
    LEAST_BITS_FIELD_NUMBER: _ClassVar[int]
    most_bits: int
    least_bits: int
    def __init__(self, most_bits: _Optional[int] = ..., least_bits: _Optional[int] = ...) -> None: ...

class Position(_message.Message):
    __slots__ = ("ledger_id", "entry_id")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ...) -> None: ...

class MessageIdData(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "batch_index", "partition")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    batch_index: int
    partition: int
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., batch_index: _Optional[int] = ..., partition: _Optional[int] = ...) -> None: ...

class EntryMetadata(_message.Message):
    __slots__ = ("type", "num_messages", "publish_time_ms", "producer_name", "sequence_id", "txn_id", "low_watermark")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NUM_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    LOW_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    type: EntryType
    num_messages: int
    publish_time_ms: int
    producer_name: str
    sequence_id: int
    txn_id: TxnId
    low_watermark: int
    def __init__(self, type: _Optional[_Union[EntryType, str]] = ..., num_messages: _Optional[int] = ..., publish_time_ms: _Optional[int] = ..., producer_name: _Optional[str] = ..., sequence_id: _Optional[int] = ..., txn_id: _Optional[_Union[TxnId, _Mapping]] = ..., low_watermark: _Optional[int] = ...) -> None: ...

class SingleMessage(_message.Message):
    __slots__ = ("payload", "partition_key", "properties", "event_time_ms", "has_partition_key")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    HAS_PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    partition_key: str
    properties: _containers.ScalarMap[str, str]
    event_time_ms: int
    has_partition_key: bool
    def __init__(self, payload: _Optional[bytes] = ..., partition_key: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., event_time_ms: _Optional[int] = ..., has_partition_key: _Optional[bool] = ...) -> None: ...

class MessageBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[SingleMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[SingleMessage, _Mapping]]] = ...) -> None: ...

class ProducerOpen(_message.Message):
    __slots__ = ("topic", "producer_name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    producer_name: str
    def __init__(self, topic: _Optional[str] = ..., producer_name: _Optional[str] = ...) -> None: ...

class ProducerSend(_message.Message):
    __slots__ = ("sequence_id", "metadata", "payload", "partition_key", "has_partition_key")
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    HAS_PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    sequence_id: int
    metadata: EntryMetadata
    payload: bytes
    partition_key: str
    has_partition_key: bool
    def __init__(self, sequence_id: _Optional[int] = ..., metadata: _Optional[_Union[EntryMetadata, _Mapping]] = ..., payload: _Optional[bytes] = ..., partition_key: _Optional[str] = ..., has_partition_key: _Optional[bool] = ...) -> None: ...

class ProducerSends(_message.Message):
    __slots__ = ("sends",)
    SENDS_FIELD_NUMBER: _ClassVar[int]
    sends: _containers.RepeatedCompositeFieldContainer[ProducerSend]
    def __init__(self, sends: _Optional[_Iterable[_Union[ProducerSend, _Mapping]]] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("open", "send", "sends")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    SEND_FIELD_NUMBER: _ClassVar[int]
    SENDS_FIELD_NUMBER: _ClassVar[int]
    open: ProducerOpen
    send: ProducerSend
    sends: ProducerSends
    def __init__(self, open: _Optional[_Union[ProducerOpen, _Mapping]] = ..., send: _Optional[_Union[ProducerSend, _Mapping]] = ..., sends: _Optional[_Union[ProducerSends, _Mapping]] = ...) -> None: ...

class ProducerOpened(_message.Message):
    __slots__ = ("topic", "producer_name", "max_message_size", "last_sequence_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    producer_name: str
    max_message_size: int
    last_sequence_id: int
    def __init__(self, topic: _Optional[str] = ..., producer_name: _Optional[str] = ..., max_message_size: _Optional[int] = ..., last_sequence_id: _Optional[int] = ...) -> None: ...

class SendReceipt(_message.Message):
    __slots__ = ("sequence_id", "ledger_id", "entry_id", "duplicate")
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    sequence_id: int
    ledger_id: int
    entry_id: int
    duplicate: bool
    def __init__(self, sequence_id: _Optional[int] = ..., ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class SendError(_message.Message):
    __slots__ = ("sequence_id", "code", "message")
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    sequence_id: int
    code: str
    message: str
    def __init__(self, sequence_id: _Optional[int] = ..., code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class SendReceipts(_message.Message):
    __slots__ = ("receipts",)
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    receipts: _containers.RepeatedCompositeFieldContainer[SendReceipt]
    def __init__(self, receipts: _Optional[_Iterable[_Union[SendReceipt, _Mapping]]] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("opened", "receipt", "error", "receipts")
    OPENED_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    opened: ProducerOpened
    receipt: SendReceipt
    error: SendError
    receipts: SendReceipts
    def __init__(self, opened: _Optional[_Union[ProducerOpened, _Mapping]] = ..., receipt: _Optional[_Union[SendReceipt, _Mapping]] = ..., error: _Optional[_Union[SendError, _Mapping]] = ..., receipts: _Optional[_Union[SendReceipts, _Mapping]] = ...) -> None: ...

class SubscribeOpen(_message.Message):
    __slots__ = ("topic", "subscription", "type", "initial_position", "isolation_level", "consumer_name", "priority_level", "key_shared")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    INITIAL_POSITION_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    KEY_SHARED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    type: SubscriptionType
    initial_position: InitialPosition
    isolation_level: IsolationLevel
    consumer_name: str
    priority_level: int
    key_shared: KeySharedMeta
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., type: _Optional[_Union[SubscriptionType, str]] = ..., initial_position: _Optional[_Union[InitialPosition, str]] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ..., consumer_name: _Optional[str] = ..., priority_level: _Optional[int] = ..., key_shared: _Optional[_Union[KeySharedMeta, _Mapping]] = ...) -> None: ...

class HashRange(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class KeySharedMeta(_message.Message):
    __slots__ = ("mode", "ranges")
    MODE_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    mode: KeySharedMode
    ranges: _containers.RepeatedCompositeFieldContainer[HashRange]
    def __init__(self, mode: _Optional[_Union[KeySharedMode, str]] = ..., ranges: _Optional[_Iterable[_Union[HashRange, _Mapping]]] = ...) -> None: ...

class Flow(_message.Message):
    __slots__ = ("permits",)
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    permits: int
    def __init__(self, permits: _Optional[int] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("request_id", "message_ids", "cumulative", "txn_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_FIELD_NUMBER: _ClassVar[int]
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    message_ids: _containers.RepeatedCompositeFieldContainer[MessageIdData]
    cumulative: bool
    txn_id: TxnId
    def __init__(self, request_id: _Optional[int] = ..., message_ids: _Optional[_Iterable[_Union[MessageIdData, _Mapping]]] = ..., cumulative: _Optional[bool] = ..., txn_id: _Optional[_Union[TxnId, _Mapping]] = ...) -> None: ...

class Redeliver(_message.Message):
    __slots__ = ("message_ids", "redelivery_counts")
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    REDELIVERY_COUNTS_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedCompositeFieldContainer[MessageIdData]
    redelivery_counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, message_ids: _Optional[_Iterable[_Union[MessageIdData, _Mapping]]] = ..., redelivery_counts: _Optional[_Iterable[int]] = ...) -> None: ...

class Seek(_message.Message):
    __slots__ = ("request_id", "message_id", "timestamp_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    message_id: MessageIdData
    timestamp_ms: int
    def __init__(self, request_id: _Optional[int] = ..., message_id: _Optional[_Union[MessageIdData, _Mapping]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class Unsubscribe(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("subscribe", "flow", "ack", "redeliver", "seek", "unsubscribe")
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    REDELIVER_FIELD_NUMBER: _ClassVar[int]
    SEEK_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    subscribe: SubscribeOpen
    flow: Flow
    ack: Ack
    redeliver: Redeliver
    seek: Seek
    unsubscribe: Unsubscribe
    def __init__(self, subscribe: _Optional[_Union[SubscribeOpen, _Mapping]] = ..., flow: _Optional[_Union[Flow, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., redeliver: _Optional[_Union[Redeliver, _Mapping]] = ..., seek: _Optional[_Union[Seek, _Mapping]] = ..., unsubscribe: _Optional[_Union[Unsubscribe, _Mapping]] = ...) -> None: ...

class Subscribed(_message.Message):
    __slots__ = ("topic", "subscription", "isolation_level")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    isolation_level: IsolationLevel
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ...) -> None: ...

class EntryDelivery(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "metadata", "payload", "redelivery_count", "acked_batch_indexes")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    REDELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACKED_BATCH_INDEXES_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    metadata: EntryMetadata
    payload: bytes
    redelivery_count: int
    acked_batch_indexes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., metadata: _Optional[_Union[EntryMetadata, _Mapping]] = ..., payload: _Optional[bytes] = ..., redelivery_count: _Optional[int] = ..., acked_batch_indexes: _Optional[_Iterable[int]] = ...) -> None: ...

class Deliveries(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[EntryDelivery]
    def __init__(self, entries: _Optional[_Iterable[_Union[EntryDelivery, _Mapping]]] = ...) -> None: ...

class RequestDone(_message.Message):
    __slots__ = ("request_id", "error_code", "error_message")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    error_code: str
    error_message: str
    def __init__(self, request_id: _Optional[int] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class ActiveConsumerChange(_message.Message):
    __slots__ = ("is_active",)
    IS_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    is_active: bool
    def __init__(self, is_active: _Optional[bool] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("subscribed", "deliveries", "done", "active_change")
    SUBSCRIBED_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    subscribed: Subscribed
    deliveries: Deliveries
    done: RequestDone
    active_change: ActiveConsumerChange
    def __init__(self, subscribed: _Optional[_Union[Subscribed, _Mapping]] = ..., deliveries: _Optional[_Union[Deliveries, _Mapping]] = ..., done: _Optional[_Union[RequestDone, _Mapping]] = ..., active_change: _Optional[_Union[ActiveConsumerChange, _Mapping]] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("topic", "start", "max_entries", "isolation_level", "max_wait_ms", "include_markers", "max_bytes")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_MARKERS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    start: Position
    max_entries: int
    isolation_level: IsolationLevel
    max_wait_ms: int
    include_markers: bool
    max_bytes: int
    def __init__(self, topic: _Optional[str] = ..., start: _Optional[_Union[Position, _Mapping]] = ..., max_entries: _Optional[int] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ..., max_wait_ms: _Optional[int] = ..., include_markers: _Optional[bool] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class AbortedTxn(_message.Message):
    __slots__ = ("txn_id", "first_position")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_POSITION_FIELD_NUMBER: _ClassVar[int]
    txn_id: TxnId
    first_position: Position
    def __init__(self, txn_id: _Optional[_Union[TxnId, _Mapping]] = ..., first_position: _Optional[_Union[Position, _Mapping]] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("entries", "next_position", "bound", "aborted")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_POSITION_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[EntryDelivery]
    next_position: Position
    bound: Position
    aborted: _containers.RepeatedCompositeFieldContainer[AbortedTxn]
    def __init__(self, entries: _Optional[_Iterable[_Union[EntryDelivery, _Mapping]]] = ..., next_position: _Optional[_Union[Position, _Mapping]] = ..., bound: _Optional[_Union[Position, _Mapping]] = ..., aborted: _Optional[_Iterable[_Union[AbortedTxn, _Mapping]]] = ...) -> None: ...

class GetLastMessageIdRequest(_message.Message):
    __slots__ = ("topic", "include_ledgers")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_LEDGERS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    include_ledgers: bool
    def __init__(self, topic: _Optional[str] = ..., include_ledgers: _Optional[bool] = ...) -> None: ...

class LedgerInfo(_message.Message):
    __slots__ = ("ledger_id", "entries", "size_bytes", "closed")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entries: int
    size_bytes: int
    closed: bool
    def __init__(self, ledger_id: _Optional[int] = ..., entries: _Optional[int] = ..., size_bytes: _Optional[int] = ..., closed: _Optional[bool] = ...) -> None: ...

class GetLastMessageIdResponse(_message.Message):
    __slots__ = ("last_confirmed_entry", "max_read_position", "ledgers")
    LAST_CONFIRMED_ENTRY_FIELD_NUMBER: _ClassVar[int]
    MAX_READ_POSITION_FIELD_NUMBER: _ClassVar[int]
    LEDGERS_FIELD_NUMBER: _ClassVar[int]
    last_confirmed_entry: Position
    max_read_position: Position
    ledgers: _containers.RepeatedCompositeFieldContainer[LedgerInfo]
    def __init__(self, last_confirmed_entry: _Optional[_Union[Position, _Mapping]] = ..., max_read_position: _Optional[_Union[Position, _Mapping]] = ..., ledgers: _Optional[_Iterable[_Union[LedgerInfo, _Mapping]]] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("topic", "grpc_address", "http_address", "tls", "service_url", "http_url", "action")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_URL_FIELD_NUMBER: _ClassVar[int]
    HTTP_URL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    grpc_address: str
    http_address: str
    tls: bool
    service_url: str
    http_url: str
    action: LookupAction
    def __init__(self, topic: _Optional[str] = ..., grpc_address: _Optional[str] = ..., http_address: _Optional[str] = ..., tls: _Optional[bool] = ..., service_url: _Optional[str] = ..., http_url: _Optional[str] = ..., action: _Optional[_Union[LookupAction, str]] = ...) -> None: ...

class NewTransactionRequest(_message.Message):
    __slots__ = ("timeout_ms", "name")
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    timeout_ms: int
    name: str
    def __init__(self, timeout_ms: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class NewTransactionResponse(_message.Message):
    __slots__ = ("txn_id", "state", "coordinator_address")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    txn_id: TxnId
    state: str
    coordinator_address: str
    def __init__(self, txn_id: _Optional[_Union[TxnId, _Mapping]] = ..., state: _Optional[str] = ..., coordinator_address: _Optional[str] = ...) -> None: ...

class EndTransactionRequest(_message.Message):
    __slots__ = ("txn_id", "action")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    txn_id: TxnId
    action: TxnAction
    def __init__(self, txn_id: _Optional[_Union[TxnId, _Mapping]] = ..., action: _Optional[_Union[TxnAction, str]] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ("txn_id", "state")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    txn_id: TxnId
    state: str
    def __init__(self, txn_id: _Optional[_Union[TxnId, _Mapping]] = ..., state: _Optional[str] = ...) -> None: ...

class GetTransactionRequest(_message.Message):
    __slots__ = ("txn_id",)
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    txn_id: TxnId
    def __init__(self, txn_id: _Optional[_Union[TxnId, _Mapping]] = ...) -> None: ...

class GetTransactionResponse(_message.Message):
    __slots__ = ("txn_id", "state", "open_timestamp_ms", "timeout_at_ms", "ended_timestamp_ms", "name", "coordinator_low_watermark")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OPEN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_LOW_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    txn_id: TxnId
    state: TxnState
    open_timestamp_ms: int
    timeout_at_ms: int
    ended_timestamp_ms: int
    name: str
    coordinator_low_watermark: int
    def __init__(self, txn_id: _Optional[_Union[TxnId, _Mapping]] = ..., state: _Optional[_Union[TxnState, str]] = ..., open_timestamp_ms: _Optional[int] = ..., timeout_at_ms: _Optional[int] = ..., ended_timestamp_ms: _Optional[int] = ..., name: _Optional[str] = ..., coordinator_low_watermark: _Optional[int] = ...) -> None: ...
