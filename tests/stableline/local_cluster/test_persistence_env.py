"""persistence_env: a local cluster of one or two brokers gets a default persistence
policy it can hold (3 copies need 3 brokers); three or more keep the store's default,
and what the operator's environment already says wins."""

from __future__ import annotations

from stableline.broker.config import load_config
from stableline.broker.topics.persistence import PersistencePolicy, default_persistence
from stableline.local_cluster.broker_process import persistence_env

ETCD = {"metadata_store_url": "etcd://127.0.0.1:2379"}


def _policy(env: dict[str, str], monkeypatch) -> PersistencePolicy:
    """The default a broker started with `env` resolves (the environment put back after)."""
    with monkeypatch.context() as patched:
        for key, value in env.items():
            patched.setenv(key, value)
        return default_persistence(load_config(overrides=ETCD))


def test_one_or_two_brokers_get_a_policy_they_can_hold(monkeypatch):
    assert _policy(persistence_env(1), monkeypatch) == PersistencePolicy(1, 1, 1)
    assert _policy(persistence_env(2), monkeypatch) == PersistencePolicy(2, 2, 1)


def test_three_brokers_keep_the_stores_default(monkeypatch):
    assert persistence_env(3) == {} and persistence_env(5) == {}
    assert _policy(persistence_env(3), monkeypatch) == PersistencePolicy(3, 3, 2)


def test_the_operators_environment_wins(monkeypatch):
    monkeypatch.setenv("STABLELINE_DEFAULT_ACK_QUORUM", "2")
    assert "STABLELINE_DEFAULT_ACK_QUORUM" not in persistence_env(2)
    assert _policy(persistence_env(2), monkeypatch) == PersistencePolicy(2, 2, 2)
