"""Options values: the defaults API.md documents, checks made once when a value is
made, and both faces' signatures built from them (so neither can drift)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import stableline
from stableline import aio
from stableline.aio.options import (
    ClientOptions,
    ConsumerOptions,
    ProducerOptions,
    ReaderOptions,
)

# (method on each face, its options value, the parameters before the options)
FACTORIES = [
    ("__init__", ClientOptions, ["service_url"]),
    ("create_producer", ProducerOptions, ["topic"]),
    ("subscribe", ConsumerOptions, ["topic", "subscription_name"]),
    ("create_reader", ReaderOptions, ["topic"]),
]


def test_the_defaults_are_the_ones_api_md_documents():
    assert ClientOptions() == ClientOptions(
        operation_timeout_seconds=30.0,
        authentication=None,
        tls_trust_certs_file_path=None,
        tls_certificate_file_path=None,
        tls_private_key_file_path=None,
        connection_backoff=None,
    )
    assert ProducerOptions() == ProducerOptions(
        producer_name=None,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=1,
        max_pending_messages=100_000,
        block_if_queue_full=False,
        batching_type=stableline.BatchingType.Default,
        partitions_update_interval_s=60.0,
    )
    assert ConsumerOptions() == ConsumerOptions(
        consumer_type=stableline.ConsumerType.Exclusive,
        initial_position=stableline.InitialPosition.Latest,
        isolation_level=stableline.IsolationLevel.READ_COMMITTED,
        receiver_queue_size=1000,
        consumer_name=None,
        ack_timeout_ms=0,
        negative_ack_redelivery_delay_ms=60_000,
        priority_level=0,
        key_shared_policy=None,
        partitions_update_interval_s=60.0,
    )
    assert ReaderOptions() == ReaderOptions(
        start_message_id=stableline.MessageId.earliest,
        isolation_level=stableline.IsolationLevel.READ_COMMITTED,
    )


@pytest.mark.parametrize("method, options, leading", FACTORIES, ids=[f[0] for f in FACTORIES])
@pytest.mark.parametrize("face", [stableline.Client, aio.Client], ids=["blocking", "asyncio"])
def test_each_face_takes_the_options_fields_in_order_with_their_defaults(
    face, method, options, leading
):
    parameters = list(inspect.signature(getattr(face, method)).parameters.values())[1:]
    assert [p.name for p in parameters[: len(leading)]] == leading
    assert all(p.default is inspect.Parameter.empty for p in parameters[: len(leading)])
    fields = dataclasses.fields(options)
    rest = parameters[len(leading) :]
    assert [p.name for p in rest] == [f.name for f in fields]
    assert [p.default for p in rest] == [f.default for f in fields]


@pytest.mark.parametrize("method, options, leading", FACTORIES, ids=[f[0] for f in FACTORIES])
def test_both_faces_have_one_signature(method, options, leading):
    def shape(function):
        return [
            (p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()
        ]

    assert shape(getattr(stableline.Client, method)) == shape(getattr(aio.Client, method))


def test_the_client_s_time_limit_stays_positional_and_the_rest_keyword_only():
    for face in (stableline.Client, aio.Client):
        kinds = {p.name: p.kind for p in inspect.signature(face.__init__).parameters.values()}
        del kinds["self"]
        assert kinds.pop("service_url") is inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert kinds.pop("operation_timeout_seconds") is inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert set(kinds.values()) == {inspect.Parameter.KEYWORD_ONLY}


def test_enum_options_given_as_text_or_number_come_out_as_the_enum():
    options = ConsumerOptions(
        consumer_type=stableline.ConsumerType.Shared.value,
        initial_position=stableline.InitialPosition.Earliest.value,
        isolation_level="read_uncommitted",
    )
    assert options.consumer_type is stableline.ConsumerType.Shared
    assert options.initial_position is stableline.InitialPosition.Earliest
    assert options.isolation_level is stableline.IsolationLevel.READ_UNCOMMITTED
    assert ReaderOptions(isolation_level="read-uncommitted").isolation_level is (
        stableline.IsolationLevel.READ_UNCOMMITTED
    )


@pytest.mark.parametrize(
    "make, named",
    [
        (lambda: ProducerOptions(batching_max_messages=0), "batching_max_messages"),
        (lambda: ProducerOptions(max_pending_messages=0), "max_pending_messages"),
        (lambda: ConsumerOptions(receiver_queue_size=0), "receiver_queue_size"),
        (lambda: ConsumerOptions(ack_timeout_ms=-1), "ack_timeout_ms"),
        (lambda: ConsumerOptions(negative_ack_redelivery_delay_ms=-1), "negative_ack"),
        (lambda: ConsumerOptions(isolation_level="serializable"), "isolation level"),
        (lambda: ClientOptions(operation_timeout_seconds=0), "operation_timeout_seconds"),
        (lambda: ProducerOptions(partitions_update_interval_s=-1), "partitions_update_interval"),
        (lambda: ConsumerOptions(partitions_update_interval_s="1"), "partitions_update_interval"),
    ],
)
def test_a_bad_option_is_refused_naming_it(make, named):
    with pytest.raises(ValueError, match=named):
        make()


def test_a_reader_start_must_be_a_message_id():
    with pytest.raises(TypeError, match="start_message_id must be a MessageId"):
        ReaderOptions(start_message_id="0:1")


def test_options_are_frozen_values():
    options = ProducerOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.batching_max_messages = 5  # type: ignore[misc]
    assert ProducerOptions(producer_name="p") == ProducerOptions(producer_name="p")
    assert not hasattr(options, "__dict__")
