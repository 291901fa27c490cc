"""A namespace's persistence policy (Pulsar's `set-persistence`): how many brokers hold
each of its topics' ledgers, and how many must have an entry before it is acknowledged.

Promises:
- `PersistencePolicy(ensemble_size, write_quorum, ack_quorum)` is BookKeeper's
  E, Qw and Qa: a ledger lives on E brokers (its ensemble), each entry is written to
  Qw of them and acknowledged once Qa have it, and 1 <= Qa <= Qw <= E always holds
  (a value breaking it is never made: ValueError naming the rule). Entries are not
  striped: every member holds every entry (its copy is the log it opens as the topic
  on a takeover), so a Qw below E is kept, as Pulsar's document has it, and written
  as E.
- Its JSON is Pulsar's PersistencePolicies document (`bookkeeperEnsemble`,
  `bookkeeperWriteQuorum`, `bookkeeperAckQuorum`); Pulsar's
  `managedLedgerMaxMarkDeleteRate` is taken and ignored (cursor positions are
  written at `cursor_flush_interval_s` here).
- `default_persistence(config)` is the broker's default, for namespaces without a
  policy: the config keys `default_ensemble_size`, `default_write_quorum`,
  `default_ack_quorum`, each 0 ("by store") resolved by the metadata store the broker
  runs with: 3/3/2 with a shared store (etcd: Kafka's replication factor 3 with
  min.insync.replicas 2, Pulsar's recommended production setting), 1/1/1 embedded
  (one broker: one copy, nothing about it changes or costs more).
"""

from __future__ import annotations

from dataclasses import dataclass

from stableline.broker.config import BrokerConfig
from stableline.broker.errors import BrokerError

_ENSEMBLE = "bookkeeperEnsemble"
_WRITE_QUORUM = "bookkeeperWriteQuorum"
_ACK_QUORUM = "bookkeeperAckQuorum"
# Pulsar's document carries it; a cursor's positions are flushed on their own timer here.
_IGNORED = "managedLedgerMaxMarkDeleteRate"
EXAMPLE = f'{{"{_ENSEMBLE}": 3, "{_WRITE_QUORUM}": 3, "{_ACK_QUORUM}": 2}}'


class InvalidPersistenceError(BrokerError, ValueError):
    """A persistence policy that breaks 1 <= ack quorum <= write quorum <= ensemble,
    or a body that is not one."""

    code = "InvalidArgument"


class NotEnoughBrokersError(BrokerError):
    """Fewer live brokers than the persistence policy's ensemble: nothing was placed."""

    code = "NotEnoughBrokers"

    def __init__(self, what: str, namespace: str, live: int, policy: PersistencePolicy):
        self.live = live
        self.policy = policy
        super().__init__(
            f"{what} cannot be placed: {live} live broker{'s' if live != 1 else ''}, but "
            f"its persistence policy asks for an ensemble of {policy.ensemble_size} "
            f"(write quorum {policy.write_quorum}, ack quorum {policy.ack_quorum}); retry "
            f"once more brokers are up, or lower namespace {namespace}'s policy with "
            f"`stableline admin namespaces set-persistence {namespace} --ensemble N "
            f"--write-quorum N --ack-quorum N` (without one, the broker config's "
            f"default_ensemble_size, default_write_quorum and default_ack_quorum apply)"
        )


@dataclass(frozen=True, slots=True)
class PersistencePolicy:
    """E, Qw, Qa of a namespace's ledgers (see the module docstring)."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int

    def __post_init__(self) -> None:
        for name in ("ensemble_size", "write_quorum", "ack_quorum"):
            value = getattr(self, name)
            if type(value) is not int:
                raise InvalidPersistenceError(f"{name} must be a whole number, got {value!r}")
        if self.ack_quorum < 1:
            raise InvalidPersistenceError(
                f"ack quorum {self.ack_quorum}: it must be at least 1 "
                "(1 <= ack quorum <= write quorum <= ensemble)"
            )
        if self.ack_quorum > self.write_quorum:
            raise InvalidPersistenceError(
                f"ack quorum {self.ack_quorum} is larger than write quorum "
                f"{self.write_quorum}: an entry cannot be acknowledged by more brokers than "
                "it is written to (1 <= ack quorum <= write quorum <= ensemble)"
            )
        if self.write_quorum > self.ensemble_size:
            raise InvalidPersistenceError(
                f"write quorum {self.write_quorum} is larger than ensemble "
                f"{self.ensemble_size}: an entry cannot be written to more brokers than "
                "hold the ledger (1 <= ack quorum <= write quorum <= ensemble)"
            )

    def to_json(self) -> dict[str, int]:
        """Pulsar's PersistencePolicies document."""
        return {
            _ENSEMBLE: self.ensemble_size,
            _WRITE_QUORUM: self.write_quorum,
            _ACK_QUORUM: self.ack_quorum,
        }

    @classmethod
    def from_json(cls, document: object) -> PersistencePolicy:
        """From Pulsar's document; anything else raises InvalidPersistenceError."""
        if not isinstance(document, dict):
            raise InvalidPersistenceError(f"the body must be a JSON object such as {EXAMPLE}")
        unknown = set(document) - {_ENSEMBLE, _WRITE_QUORUM, _ACK_QUORUM, _IGNORED}
        if unknown:
            raise InvalidPersistenceError(f"unknown fields {sorted(unknown)}: send {EXAMPLE}")
        missing = [key for key in (_ENSEMBLE, _WRITE_QUORUM, _ACK_QUORUM) if key not in document]
        if missing:
            raise InvalidPersistenceError(f"missing {', '.join(missing)}: send {EXAMPLE}")
        return cls(document[_ENSEMBLE], document[_WRITE_QUORUM], document[_ACK_QUORUM])


# One copy: the embedded store's default, and what a shard or topic had before
# ensembles were recorded.
SINGLE_COPY = PersistencePolicy(1, 1, 1)
# A shared store's default: three copies, acknowledged at two.
REPLICATED = PersistencePolicy(3, 3, 2)


def default_persistence(config: BrokerConfig) -> PersistencePolicy:
    """The broker's default policy (module docstring): a key left at 0 takes its
    store's value, except that the write quorum left at 0 is the ensemble (every
    member holds every entry) and the ack quorum at most that: setting only
    `default_ensemble_size = 1` gives 1/1/1, only `= 5` with etcd 5/5/2.
    InvalidPersistenceError when the keys set break the rule."""
    by_store = REPLICATED if config.metadata_store_url else SINGLE_COPY
    ensemble = config.default_ensemble_size or by_store.ensemble_size
    write_quorum = config.default_write_quorum or ensemble
    ack_quorum = config.default_ack_quorum or min(by_store.ack_quorum, write_quorum)
    try:
        return PersistencePolicy(ensemble, write_quorum, ack_quorum)
    except InvalidPersistenceError as error:
        raise InvalidPersistenceError(
            f"config default_ensemble_size/default_write_quorum/default_ack_quorum "
            f"give {ensemble}/{write_quorum}/{ack_quorum}: {error}"
        ) from None
