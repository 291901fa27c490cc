"""`stableline admin topics|subscriptions ...` against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import stableline


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stableline", *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
    )


def _admin(broker, *args: str) -> subprocess.CompletedProcess:
    return _cli("admin", *args, "--admin-url", broker.http_url)


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def _backlog(broker, topic: str, subscription: str) -> int:
    stats = json.loads(_ok(_admin(broker, "topics", "stats", topic)))
    return stats["subscriptions"][subscription]["msgBacklog"]


def _peeked(broker, topic: str, subscription: str, count: int = 1) -> list[str]:
    peeked = json.loads(
        _ok(_admin(broker, "subscriptions", "peek", topic, "-s", subscription, "-n", str(count)))
    )
    return [message["payload"] for message in peeked["messages"]]


def test_topics_are_created_listed_and_deleted(broker):
    assert "created" in _ok(_admin(broker, "topics", "create", "made"))
    again = _admin(broker, "topics", "create", "made")
    assert again.returncode == 1 and "409" in again.stderr and "already exists" in again.stderr
    assert _ok(_admin(broker, "topics", "list")).split() == ["persistent://public/default/made"]
    assert _ok(_admin(broker, "topics", "list", "public/default")).split() == [
        "persistent://public/default/made"
    ]
    assert "deleted" in _ok(_admin(broker, "topics", "delete", "made"))
    assert _ok(_admin(broker, "topics", "list")).split() == []
    gone = _admin(broker, "topics", "delete", "made")
    assert gone.returncode == 1 and "404" in gone.stderr


def test_listing_a_namespace_that_never_had_a_topic_says_it_does_not_exist(broker):
    result = _admin(broker, "topics", "list", "nosuch/ns")
    assert result.returncode == 1
    assert "404" in result.stderr and "namespace nosuch/ns does not exist" in result.stderr
    # A namespace exists once a topic was created in it, and stays after its topics go.
    _ok(_admin(broker, "topics", "create", "persistent://team/ns/t"))
    _ok(_admin(broker, "topics", "delete", "persistent://team/ns/t"))
    assert _ok(_admin(broker, "topics", "list", "team/ns")).split() == []
    bad = _admin(broker, "topics", "list", "just-a-tenant")
    assert bad.returncode == 2 and "tenant/namespace" in bad.stderr


def test_a_subscription_created_read_uncommitted_keeps_that_level(broker, client):
    _ok(_admin(broker, "topics", "create", "levels"))
    created = _admin(
        broker, "subscriptions", "create", "levels", "-s", "monitor", "--isolation",
        "READ_uncommitted", "-p", "earliest",
    )  # fmt: skip
    assert "READ_UNCOMMITTED" in _ok(created)
    assert _ok(_admin(broker, "subscriptions", "list", "levels")).split() == ["monitor"]
    stats = json.loads(_ok(_admin(broker, "topics", "stats", "levels")))
    assert stats["subscriptions"]["monitor"]["subscriptionIsolationLevel"] == "READ_UNCOMMITTED"
    twice = _admin(broker, "subscriptions", "create", "levels", "-s", "monitor")
    assert twice.returncode == 1 and "409" in twice.stderr
    # The level is the subscription's: a READ_COMMITTED consumer is refused.
    try:
        client.subscribe(
            "levels", "monitor", isolation_level=stableline.IsolationLevel.READ_COMMITTED
        )
        raise AssertionError("a consumer of the other level joined")
    except stableline.StableLineError as error:
        assert "READ_UNCOMMITTED" in str(error)
    missing_topic = _admin(broker, "subscriptions", "create", "nosuch", "-s", "s")
    assert missing_topic.returncode == 1 and "404" in missing_topic.stderr


def test_unsubscribe_is_refused_while_a_consumer_is_connected_unless_forced(broker, client):
    _ok(_admin(broker, "topics", "create", "busy"))
    consumer = client.subscribe("busy", "held", receiver_queue_size=1)
    producer = client.create_producer("busy")
    for index in range(3):
        producer.send(f"m{index}".encode())
    refused = _admin(broker, "subscriptions", "unsubscribe", "busy", "-s", "held")
    assert refused.returncode == 1
    assert "412" in refused.stderr and "connected consumer" in refused.stderr
    assert _backlog(broker, "busy", "held") == 3
    _ok(_admin(broker, "subscriptions", "unsubscribe", "busy", "-s", "held", "--force"))
    # The consumer was disconnected; it reconnects and subscribes again (as Pulsar's
    # does), to a new subscription at the end of the topic: the old backlog is gone.
    if "held" in _ok(_admin(broker, "subscriptions", "list", "busy")).split():
        assert _backlog(broker, "busy", "held") == 0
    consumer.close()
    missing = _admin(broker, "subscriptions", "unsubscribe", "busy", "-s", "nosuch")
    assert missing.returncode == 1 and "404" in missing.stderr


def test_skip_and_reset_cursor_move_the_subscription(broker, client):
    _ok(_admin(broker, "topics", "create", "moves"))
    _ok(_admin(broker, "subscriptions", "create", "moves", "-s", "s", "-p", "Earliest"))
    producer = client.create_producer("moves")
    for index in range(5):
        producer.send(f"m{index}".encode())  # one entry each: skips count entries
    assert _backlog(broker, "moves", "s") == 5
    assert "skipped 2 entries" in _ok(
        _admin(broker, "subscriptions", "skip", "moves", "-s", "s", "-n", "2")
    )
    assert _peeked(broker, "moves", "s") == ["m2"]
    assert _backlog(broker, "moves", "s") == 3
    assert "skipped 3 entries" in _ok(
        _admin(broker, "subscriptions", "skip", "moves", "-s", "s", "--all")
    )
    assert _backlog(broker, "moves", "s") == 0

    _ok(_admin(broker, "subscriptions", "reset-cursor", "moves", "-s", "s", "-m", "earliest"))
    assert _backlog(broker, "moves", "s") == 5
    _ok(_admin(broker, "subscriptions", "reset-cursor", "moves", "-s", "s", "-m", "latest"))
    assert _backlog(broker, "moves", "s") == 0
    _ok(_admin(broker, "subscriptions", "reset-cursor", "moves", "-s", "s", "-t", "1h"))
    assert _backlog(broker, "moves", "s") == 5
    # To a message id as consume prints it: that message is the next one read.
    internal = json.loads(_ok(_admin(broker, "topics", "internal-stats", "moves")))
    ledger_id = internal["ledgers"][-1]["ledgerId"]
    _ok(_admin(broker, "subscriptions", "reset-cursor", "moves", "-s", "s", "-m", f"{ledger_id}:3"))
    assert _peeked(broker, "moves", "s", 5) == ["m3", "m4"]
    past = _admin(
        broker, "subscriptions", "reset-cursor", "moves", "-s", "s", "-m", f"{ledger_id}:99"
    )
    assert past.returncode == 1 and "400" in past.stderr and "past the last entry" in past.stderr


def test_skip_and_reset_cursor_refuse_bad_arguments_clearly(broker):
    _ok(_admin(broker, "topics", "create", "args"))
    _ok(_admin(broker, "subscriptions", "create", "args", "-s", "s"))
    for args, text in [
        (("skip", "args", "-s", "s"), "exactly one of -n/--count or --all"),
        (("skip", "args", "-s", "s", "-n", "-1"), "-1 is not in the range x>=1"),
        (("reset-cursor", "args", "-s", "s"), "exactly one of -t/--time or -m/--message-id"),
        (("reset-cursor", "args", "-s", "s", "-t", "yesterday"), "a time ago such as"),
        (("reset-cursor", "args", "-s", "s", "-m", "3-4"), "LEDGER:ENTRY"),
    ]:
        result = _admin(broker, "subscriptions", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert text in result.stderr, (args, result.stderr)
    missing = _admin(broker, "subscriptions", "skip", "args", "-s", "nosuch", "-n", "1")
    assert missing.returncode == 1
    assert "404" in missing.stderr and "subscription 'nosuch' does not exist" in missing.stderr


def test_a_namespace_auto_topic_creation_policy_is_set_read_and_removed(broker, client):
    namespace = "cli/ns"
    topic = f"persistent://{namespace}/first-use"
    get = ("namespaces", "get-auto-topic-creation", namespace)
    assert json.loads(_ok(_admin(broker, *get))) is None
    assert "disabled" in _ok(
        _admin(broker, "namespaces", "set-auto-topic-creation", namespace, "--disable")
    )
    assert json.loads(_ok(_admin(broker, *get))) == {
        "allowAutoTopicCreation": False,
        "topicType": "non-partitioned",
    }
    policies = json.loads(_ok(_admin(broker, "namespaces", "policies", namespace)))
    assert policies["autoTopicCreationOverride"]["allowAutoTopicCreation"] is False
    with pytest.raises(stableline.TopicNotFound, match="policy is disabled"):
        client.create_producer(topic)
    assert "default" in _ok(_admin(broker, "namespaces", "remove-auto-topic-creation", namespace))
    assert json.loads(_ok(_admin(broker, *get))) is None
    client.create_producer(topic).send(b"created on first use again")


def test_set_auto_topic_creation_needs_enable_or_disable_and_a_namespace(broker):
    missing = _admin(broker, "namespaces", "set-auto-topic-creation", "cli/ns")
    assert missing.returncode == 2 and "--enable" in missing.stderr
    bad = _admin(broker, "namespaces", "get-auto-topic-creation", "no-slash")
    assert bad.returncode == 2 and "expected tenant/namespace" in bad.stderr


def test_a_namespace_persistence_policy_is_set_read_and_removed(broker, client):
    namespace = "cli/kept"
    get = ("namespaces", "get-persistence", namespace)
    assert json.loads(_ok(_admin(broker, *get))) is None  # the broker's default
    client.create_producer(f"persistent://{namespace}/t").send(b"one copy")
    stats = json.loads(_ok(_admin(broker, "topics", "stats", f"persistent://{namespace}/t")))
    assert stats["persistence"] == {"ensemble": 1, "writeQuorum": 1, "ackQuorum": 1}

    set_ = ("namespaces", "set-persistence", namespace)
    out = _ok(_admin(broker, *set_, "--ensemble", "3", "--write-quorum", "3", "--ack-quorum", "2"))
    assert "ensemble 3, write quorum 3, ack quorum 2" in out
    expected = {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2}
    assert json.loads(_ok(_admin(broker, *get))) == expected
    policies = json.loads(_ok(_admin(broker, "namespaces", "policies", namespace)))
    assert policies["persistence"] == expected

    bad = _admin(broker, *set_, "--ensemble", "3", "--write-quorum", "2", "--ack-quorum", "3")
    assert bad.returncode == 1 and "400" in bad.stderr
    assert "ack quorum 3 is larger than write quorum 2" in bad.stderr
    assert json.loads(_ok(_admin(broker, *get))) == expected  # unchanged

    # The topic made before keeps its one copy; a new one cannot have three here.
    client.create_producer(f"persistent://{namespace}/t").send(b"still served")
    with pytest.raises(stableline.NotEnoughBrokers, match=r"1 live broker, but .* ensemble of 3"):
        client.create_producer(f"persistent://{namespace}/new")

    assert "default" in _ok(_admin(broker, "namespaces", "remove-persistence", namespace))
    assert json.loads(_ok(_admin(broker, *get))) is None
    client.create_producer(f"persistent://{namespace}/new").send(b"one copy again")


def test_set_persistence_needs_all_three_numbers(broker):
    missing = _admin(broker, "namespaces", "set-persistence", "cli/ns", "--ensemble", "1")
    assert missing.returncode == 2 and "--write-quorum" in missing.stderr


def test_a_standalone_topic_unloads_in_place_and_refuses_a_transfer(broker, client):
    producer = client.create_producer("unloaded")
    producer.send(b"before")
    assert _ok(_admin(broker, "topics", "unload", "unloaded")).strip() == "unloaded unloaded"
    producer.send(b"after")  # the producer follows the unload by itself
    refused = _admin(broker, "topics", "transfer", "unloaded", "--to", "127.0.0.1:1")
    assert refused.returncode == 1 and "409" in refused.stderr and "standalone" in refused.stderr
    unloaded = _ok(_admin(broker, "namespaces", "unload", "public/default"))
    assert "persistent://public/default/unloaded: unloaded" in unloaded.splitlines()
    producer.send(b"again")
    consumer = client.subscribe(
        "unloaded", "all", initial_position=stableline.InitialPosition.Earliest
    )
    assert [consumer.receive(10_000).data() for _ in range(3)] == [b"before", b"after", b"again"]
    missing = _admin(broker, "topics", "unload", "never-made")
    assert missing.returncode == 1 and "404" in missing.stderr
