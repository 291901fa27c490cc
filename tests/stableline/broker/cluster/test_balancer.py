"""The balancer's decision (cluster/balancer.py): a hot broker is drained to the mean in
bounded moves, to members of each topic's ensemble; nothing moves back and forth;
moves per minute are capped; an even cluster moves nothing."""

from __future__ import annotations

import random

from stableline.broker.cluster.balancer import Balancer, BalancerSettings, Move, TopicLoad

ABC = ("a", "b", "c")
SETTINGS = BalancerSettings(
    threshold=0.25,
    min_excess=50.0,
    consecutive_reports=3,
    max_moves_per_minute=10,
    move_cooldown_s=300.0,
)


def six_busy_topics_on_a() -> list[TopicLoad]:
    return [TopicLoad(f"t{i}", "a", ABC, 100.0) for i in range(6)]


def decide_until_moves(balancer: Balancer, scores, topics, now: float = 0.0) -> list[Move]:
    for step in range(balancer.settings.consecutive_reports):
        moves = balancer.decide(scores, topics, now + step)
        if moves:
            return moves
    return []


def apply(moves: list[Move], scores: dict[str, float], topics: list[TopicLoad]):
    """The cluster after the moves, as the next reports show it (a copy made whole at
    once, its leaving member gone from the ensemble)."""
    scores = dict(scores)
    moved = {move.topic: move for move in moves}
    after = []
    for topic in topics:
        move = moved.get(topic.name)
        if move is not None and move.leaving:
            assert move.target not in topic.members and move.leaving in topic.members
            assert move.leaving != topic.leader
            members = (*(m for m in topic.members if m != move.leaving), move.target)
            topic = TopicLoad(topic.name, topic.leader, members, topic.score)
        elif move is not None:
            scores[move.source] -= topic.score
            scores[move.target] += topic.score
            topic = TopicLoad(topic.name, move.target, topic.members, topic.score)
        after.append(topic)
    return scores, after


def test_a_hot_broker_is_drained_to_the_mean_after_consecutive_reports():
    balancer = Balancer(SETTINGS)
    scores = {"a": 600.0, "b": 0.0, "c": 0.0}
    topics = six_busy_topics_on_a()
    assert balancer.decide(scores, topics, 0.0) == []
    assert balancer.decide(scores, topics, 5.0) == []
    moves = balancer.decide(scores, topics, 10.0)
    assert len(moves) == 4
    assert all(move.source == "a" for move in moves)
    scores, topics = apply(moves, scores, topics)
    assert scores == {"a": 200.0, "b": 200.0, "c": 200.0}
    # Even now: nothing more moves, however long it stays so.
    for step in range(20):
        assert balancer.decide(scores, topics, 15.0 + step * 5) == []


def test_moves_go_only_to_members_of_the_topics_ensemble_and_one_copy_topics_stay():
    balancer = Balancer(SETTINGS)
    scores = {"a": 600.0, "b": 0.0, "c": 0.0, "d": 0.0}
    topics = [
        TopicLoad("alone", "a", ("a",), 300.0),
        TopicLoad("ab", "a", ("a", "b"), 150.0),
        TopicLoad("ac", "a", ("a", "c"), 150.0),
    ]
    moves = decide_until_moves(balancer, scores, topics)
    assert {(move.topic, move.target) for move in moves} == {("ab", "b"), ("ac", "c")}


def test_a_move_that_would_make_the_target_the_new_hot_spot_is_not_made():
    balancer = Balancer(SETTINGS)
    # One topic carries nearly all of a's load: moving it moves the hot spot.
    scores = {"a": 900.0, "b": 100.0, "c": 100.0}
    topics = [TopicLoad("huge", "a", ABC, 850.0), TopicLoad("small", "a", ABC, 50.0)]
    moves = decide_until_moves(balancer, scores, topics)
    assert [move.topic for move in moves] == ["small"]


def test_moves_per_minute_are_capped():
    balancer = Balancer(
        BalancerSettings(min_excess=10.0, consecutive_reports=1, max_moves_per_minute=2)
    )
    scores = {"a": 1000.0, "b": 0.0, "c": 0.0}
    topics = [TopicLoad(f"t{i}", "a", ABC, 50.0) for i in range(20)]
    made = []
    now = 0.0
    while now < 60.0:
        moves = balancer.decide(scores, topics, now)
        made.extend((now, move) for move in moves)
        scores, topics = apply(moves, scores, topics)
        now += 5.0
    assert len(made) == 2
    while now < 120.0:
        moves = balancer.decide(scores, topics, now)
        made.extend((now, move) for move in moves)
        scores, topics = apply(moves, scores, topics)
        now += 5.0
    assert len(made) == 4
    # Never more than two in any 60 s.
    times = [when for when, _ in made]
    assert all(sum(1 for t in times if start <= t < start + 60) <= 2 for start in times)


def test_a_moved_topic_is_not_moved_again_within_the_cooldown():
    balancer = Balancer(
        BalancerSettings(min_excess=10.0, consecutive_reports=1, move_cooldown_s=300.0)
    )
    scores = {"a": 400.0, "b": 0.0}
    topics = [TopicLoad("t", "a", ("a", "b"), 200.0), TopicLoad("u", "a", ("a", "b"), 200.0)]
    moves = balancer.decide(scores, topics, 0.0)
    assert [(move.topic, move.target) for move in moves] == [("t", "b")]
    # Load shifts: b is hot now with t on it; t stays put until the cooldown passes.
    scores = {"a": 0.0, "b": 400.0}
    topics = [TopicLoad("t", "b", ("a", "b"), 200.0), TopicLoad("u", "b", ("a", "b"), 200.0)]
    moves = balancer.decide(scores, topics, 10.0)
    assert [move.topic for move in moves] == ["u"]
    scores = {"a": 0.0, "b": 400.0}
    topics = [TopicLoad("t", "b", ("a", "b"), 200.0), TopicLoad("u", "b", ("a", "b"), 200.0)]
    assert balancer.decide(scores, topics, 20.0) == []
    assert [move.topic for move in balancer.decide(scores, topics, 301.0)] == ["t"]


def test_an_even_or_idle_cluster_moves_nothing():
    balancer = Balancer(SETTINGS)
    even = {"a": 300.0, "b": 320.0, "c": 280.0}
    idle = {"a": 40.0, "b": 0.0, "c": 0.0}  # a is far above the mean, but by little
    topics = [TopicLoad(f"t{i}", broker, ABC, 20.0) for i, broker in enumerate(ABC * 5)]
    for step in range(10):
        assert balancer.decide(even, topics, step * 5.0) == []
        assert balancer.decide(idle, topics, step * 5.0 + 1) == []


def test_random_clusters_converge_without_any_topic_moving_twice_in_its_cooldown():
    rng = random.Random(29)
    for _ in range(50):
        brokers = [f"b{i}" for i in range(rng.randint(2, 6))]
        topics = []
        for i in range(rng.randint(1, 40)):
            members = tuple(rng.sample(brokers, min(len(brokers), rng.randint(1, 3))))
            topics.append(TopicLoad(f"t{i}", members[0], members, rng.choice([0, 10, 50, 200])))
        settings = BalancerSettings(
            min_excess=20.0, consecutive_reports=2, max_moves_per_minute=5, move_cooldown_s=120.0
        )
        balancer = Balancer(settings)
        moved_at: dict[str, float] = {}
        now = 0.0
        previous_max = None
        for _ in range(200):
            scores = {broker: 0.0 for broker in brokers}
            for topic in topics:
                scores[topic.leader] += topic.score
            moves = balancer.decide(scores, topics, now)
            for move in moves:
                if move.leaving:
                    continue  # a copy, checked by apply; the transfer comes later
                assert move.target in next(t.members for t in topics if t.name == move.topic)
                assert now - moved_at.get(move.topic, -1e9) >= settings.move_cooldown_s
                moved_at[move.topic] = now
            new_scores, topics = apply(moves, scores, topics)
            if moves:
                # Each round of moves lowers the busiest broker's score or keeps it.
                assert max(new_scores.values()) <= max(scores.values())
            previous_max = max(new_scores.values())
            now += 5.0
        assert previous_max is not None


def test_a_report_is_counted_once_however_often_it_is_read():
    balancer = Balancer(SETTINGS)
    scores = {"a": 600.0, "b": 0.0, "c": 0.0}
    topics = six_busy_topics_on_a()
    reports = {"a": 1.0, "b": 1.0, "c": 1.0}
    for step in range(10):  # read ten times, one report each: one count of three
        assert balancer.decide(scores, topics, float(step), reports) == []
    assert balancer.decide(scores, topics, 10.0, {"a": 2.0, "b": 2.0, "c": 2.0}) == []
    moves = balancer.decide(scores, topics, 11.0, {"a": 3.0, "b": 3.0, "c": 3.0})
    assert len(moves) == 4
    # The same (stale) report again, and new ones that do not show the moves yet:
    # nothing until three new reports in a row say a is still overloaded.
    assert balancer.decide(scores, topics, 12.0, {"a": 3.0, "b": 3.0, "c": 3.0}) == []
    remaining = [topic for topic in topics if topic.name not in {m.topic for m in moves}]
    assert balancer.decide(scores, remaining, 13.0, {"a": 4.0, "b": 4.0, "c": 4.0}) == []
    assert balancer.decide(scores, remaining, 14.0, {"a": 5.0, "b": 5.0, "c": 5.0}) == []


def test_a_broker_that_joins_is_sent_a_copy_then_the_topic():
    """Three even brokers, every topic on all three: a fourth, outside every ensemble,
    is sent a copy of a topic in place of its most loaded non-leader member; once its
    copy is whole (its reports name it a member) the topic is transferred to it."""
    balancer = Balancer(SETTINGS)
    topics = [TopicLoad(f"t{i}", broker, ABC, 150.0) for i, broker in enumerate(ABC * 2)]
    scores = {"a": 300.0, "b": 310.0, "c": 290.0, "d": 0.0}
    moves = decide_until_moves(balancer, scores, topics)
    assert moves, "no copy to the new broker"
    assert all(move.leaving and move.target == "d" for move in moves)
    copy = moves[0]
    topic = next(t for t in topics if t.name == copy.topic)
    others = [m for m in topic.members if m != topic.leader]
    assert copy.leaving == max(others, key=lambda m: scores[m])
    # Not asked again while it is being made.
    for step in range(5):
        again = balancer.decide(scores, topics, 10.0 + step)
        assert copy.topic not in {move.topic for move in again}
    # Whole: the topic's members name d; the next decision transfers it there.
    scores, topics = apply(moves, scores, topics)
    transfers = decide_until_moves(balancer, scores, topics, now=20.0)
    assert Move(copy.topic, copy.source, "d", copy.score) in transfers


def test_copies_to_one_broker_are_bounded_and_draining_brokers_get_none():
    settings = BalancerSettings(
        min_excess=50.0, consecutive_reports=1, max_moves_per_minute=100, max_copies_per_broker=2
    )
    balancer = Balancer(settings)
    topics = [TopicLoad(f"t{i}", "a", ("a", "b"), 10.0) for i in range(20)]
    scores = {"a": 200.0, "b": 200.0, "d": 0.0, "e": 0.0}
    moves = balancer.decide(scores, topics, 0.0, no_copies_to=frozenset({"e"}))
    assert [move.target for move in moves] == ["d", "d"]
    assert all(move.leaving == "b" for move in moves)
    assert balancer.decide(scores, topics, 1.0, no_copies_to=frozenset({"e"})) == []


def test_a_copy_not_whole_in_time_or_to_a_broker_gone_is_forgotten():
    settings = BalancerSettings(
        min_excess=50.0, consecutive_reports=1, max_copies_per_broker=1, copy_timeout_s=60.0
    )
    balancer = Balancer(settings)
    topics = [TopicLoad("t", "a", ("a", "b"), 100.0), TopicLoad("u", "b", ("a", "b"), 100.0)]
    scores = {"a": 300.0, "b": 300.0, "d": 0.0}
    [first] = balancer.decide(scores, topics, 0.0)
    assert first.target == "d"
    assert balancer.decide(scores, topics, 30.0) == []  # one copy to d at a time
    assert [move.target for move in balancer.decide(scores, topics, 61.0)] == ["d"]
    gone = {"a": 300.0, "b": 300.0}
    assert balancer.decide(gone, topics, 62.0) == []
    assert [move.target for move in balancer.decide(scores, topics, 63.0)] == ["d"]


def test_a_topic_of_one_copy_or_being_swapped_is_sent_no_copy():
    balancer = Balancer(SETTINGS)
    topics = [
        TopicLoad("alone", "a", ("a",), 200.0),
        TopicLoad("swapping", "a", ("a", "b"), 200.0, swapping=True),
    ]
    scores = {"a": 400.0, "b": 400.0, "d": 0.0}
    for step in range(5):
        assert balancer.decide(scores, topics, float(step)) == []
