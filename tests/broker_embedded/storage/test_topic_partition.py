from __future__ import annotations

import pytest

from broker_embedded.errors import InvalidTopicError
from broker_embedded.storage.topic_partition import (
    TopicPartition,
    check_no_collision,
    validate_topic,
)


@pytest.mark.parametrize(
    "name",
    ["a", "my-topic", "__consumer_offsets", "__cluster_metadata", "A.b_c-9", "x" * 249, "..."],
)
def test_legal_topic_names(name: str) -> None:
    assert validate_topic(name) == name
    assert TopicPartition(name, 0).topic == name


@pytest.mark.parametrize(
    "name", ["../x", "", ".", "..", "x" * 250, "a/b", "a\\b", "caf\u00e9", "a b", "a\x00", "t\n"]
)
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError) as e:
        TopicPartition(name, 0)
    assert repr(name) in str(e.value)


@pytest.mark.parametrize("partition", [-1, 1 << 31, True, "0", 1.0])
def test_illegal_partitions(partition: object) -> None:
    with pytest.raises(InvalidTopicError, match="partition"):
        TopicPartition("t", partition)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dir_name", "topic", "partition"),
    [
        ("my-topic-3", "my-topic", 3),
        ("__cluster_metadata-0", "__cluster_metadata", 0),
        ("product-created-events-topic-2", "product-created-events-topic", 2),
        ("a-b-c-2147483647", "a-b-c", 2147483647),
        ("t-007", "t", 7),
        ("topic--1", "topic-", 1),
    ],
)
def test_parse_partition_dir_names(dir_name: str, topic: str, partition: int) -> None:
    tp = TopicPartition.parse_dir_name(dir_name)
    assert tp == TopicPartition(topic, partition)
    assert TopicPartition.parse_dir_name(tp.dir_name) == tp


@pytest.mark.parametrize(
    "dir_name",
    [
        "meta.properties",
        "topic",
        "-0",
        "topic-",
        "topic-x",
        "topic-+1",
        "topic-1-",
        "topic-0.6ad0b6a7b39f4d4a8e5c8e0e4d2d6e1a-delete",
        "topic-0.6ad0b6a7b39f4d4a8e5c8e0e4d2d6e1a-future",
        "topic-0.6ad0b6a7b39f4d4a8e5c8e0e4d2d6e1a-stray",
        "..-0",
        "lost+found",
        "topic-2147483648",
        "topic-\u0661",
    ],
)
def test_non_partition_dir_names(dir_name: str) -> None:
    assert TopicPartition.try_parse_dir_name(dir_name) is None
    with pytest.raises(InvalidTopicError, match="directory name"):
        TopicPartition.parse_dir_name(dir_name)


def test_values_render_and_order() -> None:
    tp = TopicPartition("orders", 12)
    assert tp.dir_name == "orders-12" == str(tp)
    assert sorted([TopicPartition("b", 0), TopicPartition("a", 10), TopicPartition("a", 2)]) == [
        TopicPartition("a", 2),
        TopicPartition("a", 10),
        TopicPartition("b", 0),
    ]
    with pytest.raises(AttributeError):
        tp.partition = 3  # type: ignore[misc]


def test_names_differing_in_dot_and_underscore_collide() -> None:
    """Issue 11 defect 7: Kafka's Topic.hasCollision and its InvalidTopicException message."""
    check_no_collision("a_b", ["a-b", "ab", "a_b"])  # itself and different names: no collision
    for topic, existing, other in (
        ("a_b", ["z", "a.b"], "a.b"),
        ("a.b", ["a_b"], "a_b"),
        ("x.y_z", ["x_y.z"], "x_y.z"),
    ):
        with pytest.raises(InvalidTopicError) as e:
            check_no_collision(topic, existing)
        assert str(e.value) == f"Topic '{topic}' collides with existing topic: {other}"
