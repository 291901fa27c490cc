"""What a perf run does: one frozen value holding every knob, checked once, and the
assignment of producers and consumers to worker processes.

Counts follow pulsar-perf: `producers` per topic, `subscriptions` per topic,
`consumers` per subscription. `rate` is the total across all producers (0: as fast
as they go). A run ends after `duration_s` or `messages` (whichever comes first;
0 disables either), then consumers drain what was published.
"""

from __future__ import annotations

from dataclasses import dataclass

from stableline._types import ConsumerType, InitialPosition, IsolationLevel
from stableline.topic_name import TopicName

# Every payload starts with this header: send time (us since the epoch, for the
# end-to-end latency), the transaction key (0: none) and what becomes of it.
PAYLOAD_HEADER_BYTES = 17
KIND_PLAIN, KIND_COMMIT, KIND_ABORT = ord("N"), ord("C"), ord("A")
ISOLATION_MIXED = "mixed"
ISOLATION_CHOICES = ("read_committed", "read_uncommitted", ISOLATION_MIXED)


@dataclass(frozen=True, slots=True)
class ProducerSpec:
    index: int  # global, unique per run: part of every transaction key
    topic: str
    messages: int  # this producer's share of `Workload.messages` (0: no limit)
    rate: float  # msgs/s (0: no limit)


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    index: int
    topic: str
    subscription: str
    isolation: IsolationLevel


@dataclass(frozen=True, slots=True)
class Workload:
    service_url: str = "127.0.0.1:6650"
    topic: str = "perf"  # with topics > 1: perf-0 .. perf-(n-1)
    topics: int = 1
    producers: int = 1  # per topic; 0: consume only
    subscriptions: int = 1  # per topic; 0: produce only
    consumers: int = 1  # per subscription
    processes: int = 1  # worker processes for each side (producers, consumers)
    rate: float = 0.0
    message_size: int = 100
    batch_max_messages: int = 1000
    batch_delay_ms: float = 1.0
    txn_size: int = 0  # messages per transaction (0: no limit by size)
    commit_interval_ms: float = 0.0  # commit a transaction after this long (0: no limit)
    open_txns: int = 1  # transactions each producer keeps open, written round-robin
    abort_ratio: float = 0.0  # this fraction of transactions is aborted
    isolation: str = "read_committed"  # or read_uncommitted, or mixed (alternating)
    subscription_type: str = "Shared"
    subscription_prefix: str = "perf-sub"
    initial_position: str = "Latest"
    receive_max: int = 1000  # max_num_messages of batch_receive
    receiver_queue_size: int = 20_000
    max_lag: int = 200_000  # producers wait while consumers are this many messages behind
    window_batches: int = 64  # batches a producer has sent and not yet seen acknowledged
    duration_s: float = 10.0
    # Latencies of what is sent in the first seconds are not recorded (rates are):
    # connections, the first ledger and caches warm up then (pulsar-perf's --warmup-time).
    warmup_s: float = 1.0
    messages: int = 0
    drain_timeout_s: float = 60.0
    interval_s: float = 1.0
    # A secure broker: the token to authenticate with, the CA of its TLS certificate.
    token: str | None = None
    tls_trust_certs_file: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.topics < 1:
            problems.append("--topics must be >= 1")
        if self.producers < 0 or self.subscriptions < 0 or self.consumers < 1:
            problems.append("--producers and --subscriptions must be >= 0, --consumers >= 1")
        if self.producers == 0 and self.subscriptions == 0:
            problems.append("nothing to do: no producers and no subscriptions")
        if self.processes < 1:
            problems.append("--processes must be >= 1")
        if self.rate < 0:
            problems.append("--rate must be >= 0")
        if self.message_size < PAYLOAD_HEADER_BYTES:
            problems.append(
                f"--size must be >= {PAYLOAD_HEADER_BYTES} bytes (each message carries its "
                "send time and transaction for the latency and isolation checks)"
            )
        if self.batch_max_messages < 1 or self.batch_delay_ms < 0:
            problems.append("--batch-max-messages must be >= 1 and --batch-delay-ms >= 0")
        if self.txn_size < 0 or self.commit_interval_ms < 0 or self.open_txns < 1:
            problems.append("--txn-size and --commit-interval-ms must be >= 0, --open-txns >= 1")
        if not 0 <= self.abort_ratio <= 1:
            problems.append("--abort-ratio must be in [0, 1]")
        if self.abort_ratio and not self.transactional:
            problems.append("--abort-ratio needs transactions (--txn-size or --commit-interval-ms)")
        if self.isolation not in ISOLATION_CHOICES:
            problems.append(f"--isolation must be one of {', '.join(ISOLATION_CHOICES)}")
        if self.subscription_type not in ConsumerType.__members__:
            problems.append(
                f"--subscription-type must be one of {', '.join(ConsumerType.__members__)}"
            )
        if self.initial_position not in InitialPosition.__members__:
            problems.append("--initial-position must be Earliest or Latest")
        if self.receive_max < 1 or self.receiver_queue_size < 1 or self.window_batches < 1:
            problems.append("--receive-max, --receiver-queue-size and the window must be >= 1")
        if self.max_lag < 0 or self.duration_s < 0 or self.messages < 0 or self.warmup_s < 0:
            problems.append("--max-lag, --duration, --messages and --warmup must be >= 0")
        if self.duration_s == 0 and self.messages == 0:
            problems.append("unbounded run: give --duration or --messages")
        if self.interval_s <= 0 or self.drain_timeout_s <= 0:
            problems.append("the progress interval and drain timeout must be > 0")
        try:
            TopicName.parse(self.topic)
        except ValueError as error:
            problems.append(f"--topic: {error}")
        if problems:
            raise ValueError("; ".join(problems))

    def record_latencies_from_us(self, now_us: int) -> int:
        """The send time (us) from which latencies are recorded, for a run starting now."""
        return now_us + int(self.warmup_s * 1e6) if self.warmup_s else 0

    def client_options(self) -> dict:
        """Keyword arguments for stableline.aio.Client: this run's credentials."""
        from stableline._auth import AuthenticationToken

        options: dict = {}
        if self.token:
            options["authentication"] = AuthenticationToken(self.token)
        if self.tls_trust_certs_file:
            options["tls_trust_certs_file_path"] = self.tls_trust_certs_file
        return options

    @property
    def transactional(self) -> bool:
        return self.txn_size > 0 or self.commit_interval_ms > 0

    def topic_names(self) -> list[str]:
        if self.topics == 1:
            return [self.topic]
        return [f"{self.topic}-{index}" for index in range(self.topics)]

    def producer_specs(self) -> list[ProducerSpec]:
        total = self.producers * self.topics
        specs = []
        for index in range(total):
            share = self.messages // total + (1 if index < self.messages % total else 0)
            topic = self.topic_names()[index % self.topics]
            specs.append(ProducerSpec(index, topic, share, self.rate / total if self.rate else 0))
        return specs

    def isolation_of(self, subscription: int) -> IsolationLevel:
        if self.isolation == ISOLATION_MIXED:
            return (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED)[
                subscription % 2
            ]
        return IsolationLevel.parse(self.isolation)

    def consumer_specs(self) -> list[ConsumerSpec]:
        specs = []
        for topic in self.topic_names():
            for subscription in range(self.subscriptions):
                for _ in range(self.consumers):
                    specs.append(
                        ConsumerSpec(
                            len(specs),
                            topic,
                            f"{self.subscription_prefix}-{subscription}",
                            self.isolation_of(subscription),
                        )
                    )
        return specs

    def subscriptions_by_level(self) -> dict[IsolationLevel, int]:
        """How many subscriptions of each topic read at each level."""
        counts = {level: 0 for level in IsolationLevel}
        for subscription in range(self.subscriptions):
            counts[self.isolation_of(subscription)] += 1
        return counts


def split(items: list, parts: int) -> list[list]:
    """Deal `items` round-robin into at most `parts` non-empty lists (one per process)."""
    dealt = [items[start::parts] for start in range(parts)]
    return [part for part in dealt if part]
