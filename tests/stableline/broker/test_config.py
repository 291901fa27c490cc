from __future__ import annotations

from pathlib import Path

import pytest

from stableline.broker.config import load_config


def test_flags_win_over_environment_which_wins_over_the_file(tmp_path, monkeypatch):
    config_file = tmp_path / "broker.toml"
    config_file.write_text(
        'grpc_address = "127.0.0.1:1111"\nhttp_address = "127.0.0.1:2222"\n'
        'data_dir = "/from/file"\n[ledger]\nmax_entries_per_ledger = 10\n'
    )
    monkeypatch.setenv("STABLELINE_HTTP_ADDRESS", "127.0.0.1:3333")
    monkeypatch.setenv("STABLELINE_FSYNC", "false")
    config = load_config(config_file, {"data_dir": Path("/from/flag"), "grpc_address": None})
    assert config.grpc_address == "127.0.0.1:1111"
    assert config.http_address == "127.0.0.1:3333"
    assert config.data_dir == Path("/from/flag")
    assert config.ledger.max_entries_per_ledger == 10
    assert config.ledger.fsync is False


def test_unknown_keys_and_bad_values_are_errors(tmp_path, monkeypatch):
    config_file = tmp_path / "broker.toml"
    config_file.write_text("grcp_address = 'typo'\n")
    with pytest.raises(ValueError, match="unknown config key 'grcp_address'"):
        load_config(config_file)
    monkeypatch.setenv("STABLELINE_MAX_MESSAGE_SIZE", "lots")
    with pytest.raises(ValueError, match="max_message_size"):
        load_config()


def test_every_limit_has_a_default_and_must_be_at_least_one(monkeypatch):
    from stableline.broker.config import LIMIT_KEYS, BrokerConfig

    defaults = BrokerConfig()
    assert all(getattr(defaults, key) >= 1 for key in LIMIT_KEYS)
    monkeypatch.setenv("STABLELINE_MAX_UNACKED_MESSAGES_PER_CONSUMER", "7")
    assert load_config().max_unacked_messages_per_consumer == 7
    monkeypatch.setenv("STABLELINE_MAX_CONNECTIONS", "0")
    with pytest.raises(ValueError, match="max_connections must be >= 1"):
        load_config()


def test_ended_transactions_are_bounded_by_time_and_count(monkeypatch):
    defaults = load_config()
    assert (defaults.txn_ended_retention_s, defaults.max_ended_transactions) == (3600.0, 100_000)
    monkeypatch.setenv("STABLELINE_TXN_ENDED_RETENTION_S", "0.5")
    with pytest.raises(ValueError, match="txn_ended_retention_s must be >= 1"):
        load_config()
    monkeypatch.setenv("STABLELINE_TXN_ENDED_RETENTION_S", "90")
    monkeypatch.setenv("STABLELINE_MAX_ENDED_TRANSACTIONS", "0")
    with pytest.raises(ValueError, match="max_ended_transactions must be >= 1"):
        load_config()
