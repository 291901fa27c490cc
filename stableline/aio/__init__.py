"""The asyncio client: the same names as `stableline`, with async/await."""

from stableline._auth import AuthenticationToken
from stableline._errors import *  # noqa: F403  (the same typed errors)
from stableline._keys import BatchingType, KeySharedMode, KeySharedPolicy
from stableline._routing import MessageRoutingMode
from stableline._types import (
    ConsumerType,
    InitialPosition,
    IsolationLevel,
    LookupResult,
    Message,
    MessageId,
    TransactionState,
)
from stableline.aio._admission import ThreadSender
from stableline.aio._batch import SendReceipt
from stableline.aio._client import Client
from stableline.aio._consumer import Consumer
from stableline.aio._multi_consumer import MultiTopicConsumer
from stableline.aio._partitioned_producer import PartitionedProducer
from stableline.aio._producer import Producer
from stableline.aio._reader import Reader
from stableline.aio._reconnect import Backoff
from stableline.aio._transaction import Transaction
from stableline.aio._transport import ChannelFactory
from stableline.aio.options import ClientOptions, ConsumerOptions, ProducerOptions, ReaderOptions

__all__ = [
    "AuthenticationToken",
    "Backoff",
    "BatchingType",
    "ChannelFactory",
    "Client",
    "ClientOptions",
    "Consumer",
    "ConsumerOptions",
    "ConsumerType",
    "InitialPosition",
    "IsolationLevel",
    "KeySharedMode",
    "KeySharedPolicy",
    "LookupResult",
    "Message",
    "MessageId",
    "MessageRoutingMode",
    "MultiTopicConsumer",
    "PartitionedProducer",
    "Producer",
    "ProducerOptions",
    "Reader",
    "ReaderOptions",
    "SendReceipt",
    "ThreadSender",
    "Transaction",
    "TransactionState",
]
