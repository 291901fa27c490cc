"""TopicOwnership is the cluster's TopicPlacement: every question the registry and the
faces ask of a placement, it answers with the same signature."""

from __future__ import annotations

import inspect

import pytest

from stableline.broker.cluster.ownership import TopicOwnership
from stableline.broker.topics.placement import StandalonePlacement, TopicPlacement

QUESTIONS = [
    name
    for name, member in vars(TopicPlacement).items()
    if inspect.isfunction(member) and not name.startswith("_")
]


def test_the_placement_asks_what_the_registry_and_the_faces_need():
    assert set(QUESTIONS) >= {"is_placed", "claim", "check", "forget", "placed_names"}


@pytest.mark.parametrize("implementation", [TopicOwnership, StandalonePlacement])
@pytest.mark.parametrize("question", QUESTIONS)
def test_each_placement_answers_every_question_alike(implementation, question):
    asked = getattr(TopicPlacement, question)
    answer = getattr(implementation, question)
    assert inspect.iscoroutinefunction(answer) == inspect.iscoroutinefunction(asked)
    assert list(inspect.signature(answer).parameters) == list(inspect.signature(asked).parameters)
