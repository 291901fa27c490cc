"""PersistencePolicy: BookKeeper's rule 1 <= Qa <= Qw <= E on every value made, Pulsar's
PersistencePolicies document both ways, and the broker default resolved by its store."""

from __future__ import annotations

import pytest

from managed_ledger import LocalStore
from stableline.broker.config import BrokerConfig
from stableline.broker.topics.namespace_policies import EmbeddedNamespacePolicies
from stableline.broker.topics.persistence import (
    REPLICATED,
    SINGLE_COPY,
    InvalidPersistenceError,
    NotEnoughBrokersError,
    PersistencePolicy,
    default_persistence,
)

ETCD = "etcd://127.0.0.1:2379"


@pytest.mark.parametrize(
    ("values", "rule"),
    [
        ((3, 3, 0), "ack quorum 0: it must be at least 1"),
        ((3, 2, 3), "ack quorum 3 is larger than write quorum 2"),
        ((2, 3, 2), "write quorum 3 is larger than ensemble 2"),
        ((0, 0, 0), "ack quorum 0"),
        ((3, 3, 2.0), "ack_quorum must be a whole number"),
    ],
)
def test_a_policy_breaking_the_quorum_rule_is_refused_naming_the_rule(values, rule):
    with pytest.raises(InvalidPersistenceError, match=rule):
        PersistencePolicy(*values)


def test_a_bad_policy_is_a_value_error_with_the_invalid_argument_code():
    with pytest.raises(ValueError) as refused:
        PersistencePolicy(1, 1, 2)
    assert refused.value.code == "InvalidArgument"


def test_pulsars_document_round_trips_and_its_mark_delete_rate_is_taken_and_ignored():
    document = {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2}
    assert PersistencePolicy.from_json(document) == REPLICATED
    assert REPLICATED.to_json() == document
    with_rate = {**document, "managedLedgerMaxMarkDeleteRate": 1.0}
    assert PersistencePolicy.from_json(with_rate) == REPLICATED


@pytest.mark.parametrize(
    ("document", "why"),
    [
        (None, "JSON object"),
        ({"bookkeeperEnsemble": 3}, "missing bookkeeperWriteQuorum, bookkeeperAckQuorum"),
        ({"ensemble": 3}, "unknown fields"),
        ({"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 2}, "ack"),
        (
            {"bookkeeperEnsemble": "3", "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2},
            "whole",
        ),
    ],
)
def test_a_document_that_is_not_a_policy_is_refused(document, why):
    with pytest.raises(InvalidPersistenceError, match=why):
        PersistencePolicy.from_json(document)


def test_the_default_is_three_copies_acknowledged_at_two_with_etcd_and_one_embedded():
    assert default_persistence(BrokerConfig()) == SINGLE_COPY
    assert default_persistence(BrokerConfig(metadata_store_url=ETCD)) == PersistencePolicy(3, 3, 2)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"default_ensemble_size": 1}, (1, 1, 1)),
        ({"default_ensemble_size": 5}, (5, 5, 2)),
        ({"default_ensemble_size": 2, "default_ack_quorum": 1}, (2, 2, 1)),
        ({"default_ensemble_size": 3, "default_write_quorum": 2}, (3, 2, 2)),
    ],
)
def test_keys_left_at_zero_follow_the_ones_set(keys, expected):
    assert default_persistence(BrokerConfig(metadata_store_url=ETCD, **keys)) == PersistencePolicy(
        *expected
    )


def test_default_keys_that_break_the_rule_are_refused_naming_the_keys():
    config = BrokerConfig(default_ensemble_size=1, default_write_quorum=2)
    with pytest.raises(InvalidPersistenceError, match=r"default_ensemble_size.*give 1/2/1"):
        default_persistence(config)


def test_not_enough_brokers_says_how_many_are_live_what_is_asked_and_how_to_lower_it():
    error = NotEnoughBrokersError("topic persistent://a/b/t", "a/b", 3, PersistencePolicy(4, 4, 2))
    assert error.code == "NotEnoughBrokers"
    text = str(error)
    assert "3 live brokers" in text and "ensemble of 4" in text
    assert "stableline admin namespaces set-persistence a/b" in text


async def test_an_embedded_namespaces_policy_is_durable_and_read_back_at_start(tmp_path):
    store = LocalStore(tmp_path / "metadata")
    try:
        policies = EmbeddedNamespacePolicies(store)
        await policies.set_persistence("a/b", REPLICATED)
        await policies.set_persistence("a/c", SINGLE_COPY)
        assert await policies.remove_persistence("a/c")
        assert not await policies.remove_persistence("a/c")
    finally:
        store.close()
    store = LocalStore(tmp_path / "metadata")
    try:
        again = EmbeddedNamespacePolicies(store)
        assert again.persistence("a/b") == REPLICATED and again.persistence("a/c") is None
    finally:
        store.close()
