from __future__ import annotations

import pytest

from stableline.topic_name import InvalidTopicNameError, TopicName


def test_bare_name_means_public_default():
    assert str(TopicName.parse("orders")) == "persistent://public/default/orders"


def test_full_and_short_forms_parse_to_the_same_topic():
    assert TopicName.parse("persistent://acme/bank/tx") == TopicName.parse("acme/bank/tx")


@pytest.mark.parametrize(
    "bad", ["", "a/b", "non-persistent://a/b/c", "a/../c", "a b", "x" * 256, "a/b/c/d"]
)
def test_invalid_names_say_what_is_wrong(bad):
    with pytest.raises(InvalidTopicNameError, match="topic name"):
        TopicName.parse(bad)
