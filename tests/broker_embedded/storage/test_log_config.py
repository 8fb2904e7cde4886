from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from broker_embedded.storage.log_config import LONG_MAX, InvalidConfigError, LogConfig

CONF = Path(__file__).resolve().parents[3] / "conf" / "broker.toml"


def test_defaults_are_kafkas() -> None:
    props = LogConfig().to_properties()
    assert props["cleanup.policy"] == "delete"
    assert props["segment.bytes"] == "1073741824"
    assert props["retention.ms"] == "604800000"
    assert props["max.message.bytes"] == "1048588"
    assert props["min.insync.replicas"] == "1"
    assert props["flush.messages"] == str(LONG_MAX)
    assert props["unclean.leader.election.enable"] == "false"


def test_overrides_parse_strings_and_numbers() -> None:
    c = LogConfig().with_overrides(
        {"cleanup.policy": "delete, compact", "segment.bytes": "4096", "retention.ms": -1}
    )
    assert (c.cleanup_policy, c.compact, c.delete) == ("compact,delete", True, True)
    assert (c.segment_bytes, c.retention_ms) == (4096, -1)
    assert c.with_overrides({"message.timestamp.type": "LogAppendTime"}).log_append_time


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("segment.byte", 1, "unknown config 'segment.byte' for topic 't'"),
        ("segment.bytes", "x", "invalid value 'x' for segment.bytes for topic 't'"),
        ("segment.bytes", 13, "invalid value 13 for segment.bytes"),
        ("cleanup.policy", "purge", "invalid value 'purge' for cleanup.policy"),
        ("min.cleanable.dirty.ratio", 1.5, "must be in [0, 1]"),
        ("message.timestamp.type", "Now", "must be one of CreateTime, LogAppendTime"),
        ("unclean.leader.election.enable", "yes", "must be true or false"),
    ],
)
def test_bad_configs_name_the_config(name: str, value: object, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        LogConfig().with_overrides({name: value}, "t")


def test_shipped_broker_defaults_are_valid_and_kafkas() -> None:
    defaults = tomllib.loads(CONF.read_text())["topic_defaults"]
    assert LogConfig().with_overrides(defaults) == LogConfig()
