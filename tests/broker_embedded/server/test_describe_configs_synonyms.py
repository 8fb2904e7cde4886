"""DescribeConfigs sources, synonyms, types and documentation as Kafka's ``ConfigHelper`` fills
them: confluent-kafka's AdminClient.describe_configs (it asks for synonyms and shows them) and
raw kio v4 requests, against a real broker whose config file sets a topic default."""

from __future__ import annotations

import dataclasses

from confluent_kafka.admin import ConfigResource, ResourceType
from kio.schema.describe_configs.v4 import request as req4
from kio.schema.describe_configs.v4 import response as resp4

from broker_embedded.storage.log_config import LogConfig
from tests.broker_embedded.server._net import RawClient
from tests.broker_embedded.server._serve import decode_response, served
from tests.broker_embedded.server.test_admin_api import admin, results

TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
DEFAULTS = dataclasses.replace(LogConfig(), segment_bytes=2048, min_cleanable_dirty_ratio=0.25)


def chain(entry) -> list[tuple[str, str | None, int]]:
    """confluent-kafka's synonyms: a dict by name, so of a name's static and default entries
    only the last (the default) is seen, at the first one's place; the raw test sees both."""
    return [(s.name, s.value, s.source) for s in entry.synonyms.values()]


def test_confluent_shows_sources_and_synonyms(tmp_path):
    with served(tmp_path, topic_defaults=DEFAULTS) as s:
        s.broker.create_topic("t", config={"retention.ms": "1000", "segment.bytes": "4096"})
        a = admin(s.bootstrap)
        topic = ConfigResource(ResourceType.TOPIC, "t")
        broker = ConfigResource(ResourceType.BROKER, "0")
        got = results(a.describe_configs([topic, broker]))
    t = got[topic]
    retention = t["retention.ms"]  # overridden; log.retention.ms has no default: no broker part
    assert (retention.value, retention.source) == ("1000", TOPIC_CONFIG)
    assert chain(retention) == [("retention.ms", "1000", TOPIC_CONFIG)]
    segment = t["segment.bytes"]  # overridden, and set in the broker's file
    assert (segment.value, segment.source) == ("4096", TOPIC_CONFIG)
    assert chain(segment) == [
        ("segment.bytes", "4096", TOPIC_CONFIG),
        ("log.segment.bytes", "1073741824", DEFAULT_CONFIG),
    ]
    ratio = t["min.cleanable.dirty.ratio"]  # from the broker's file
    assert (ratio.value, ratio.source) == ("0.25", STATIC_BROKER_CONFIG)
    assert chain(ratio) == [("log.cleaner.min.cleanable.ratio", "0.5", DEFAULT_CONFIG)]
    policy = t["cleanup.policy"]  # Kafka's default
    assert (policy.value, policy.source) == ("delete", DEFAULT_CONFIG)
    assert chain(policy) == [("log.cleanup.policy", "delete", DEFAULT_CONFIG)]
    segment_ms = t["segment.ms"]  # log.roll.ms has no default: the log.roll.hours one is dropped
    assert (segment_ms.source, chain(segment_ms)) == (DEFAULT_CONFIG, [])
    threads = got[broker]["num.io.threads"]  # the test's config sets 2
    assert (threads.value, threads.source, threads.is_read_only) == (
        "2",
        STATIC_BROKER_CONFIG,
        True,
    )
    assert chain(threads) == [("num.io.threads", "8", DEFAULT_CONFIG)]
    auto = got[broker]["auto.create.topics.enable"]
    expected = ("true", DEFAULT_CONFIG, [("auto.create.topics.enable", "true", DEFAULT_CONFIG)])
    assert (auto.value, auto.source, chain(auto)) == expected


def describe4(client: RawClient, synonyms: bool, documentation: bool, keys=None):
    message = req4.DescribeConfigsRequest(
        resources=(
            req4.DescribeConfigsResource(
                resource_type=2, resource_name="t", configuration_keys=keys
            ),
        ),
        include_synonyms=synonyms,
        include_documentation=documentation,
    )
    response = decode_response(resp4.DescribeConfigsResponse, client.call(message), True)
    return {c.name: c for c in response.results[0].configs}


def test_synonyms_types_and_documentation_only_when_asked(tmp_path):
    with served(tmp_path, topic_defaults=DEFAULTS) as s:
        s.broker.create_topic("t", config={"cleanup.policy": "compact"})
        with RawClient(s.server) as c:
            bare = describe4(c, False, False, ("cleanup.policy", "segment.bytes", "no.such"))
            full = describe4(c, True, True)
    assert sorted(bare) == ["cleanup.policy", "segment.bytes"]
    policy = bare["cleanup.policy"]
    assert (policy.config_source, policy.synonyms, policy.documentation) == (TOPIC_CONFIG, (), None)
    assert (policy.config_type, bare["segment.bytes"].config_type) == (7, 3)  # LIST, INT
    assert [(x.name, x.value, x.source) for x in full["cleanup.policy"].synonyms] == [
        ("cleanup.policy", "compact", TOPIC_CONFIG),
        ("log.cleanup.policy", "delete", DEFAULT_CONFIG),
    ]
    assert [(x.name, x.value, x.source) for x in full["segment.bytes"].synonyms] == [
        ("log.segment.bytes", "2048", STATIC_BROKER_CONFIG),
        ("log.segment.bytes", "1073741824", DEFAULT_CONFIG),
    ]
    types = {n: e.config_type for n, e in full.items()}
    names = (
        "retention.ms",
        "min.cleanable.dirty.ratio",
        "unclean.leader.election.enable",
        "compression.type",
    )
    assert [types[n] for n in names] == [5, 6, 1, 2]  # LONG, DOUBLE, BOOLEAN, STRING
    assert all(e.documentation for e in full.values())
    assert full["retention.ms"].documentation.startswith("segments whose newest record")


def test_every_broker_and_topic_config_has_a_type_and_documentation():
    from dataclasses import fields

    from broker_embedded.broker_config import BrokerConfig
    from broker_embedded.server.handlers.describe_configs import BROKER_CONFIGS, TOPIC_CONFIGS

    tables = ("topic_defaults", "rsm_config")  # sections, not settings (rsm_config: secrets)
    keys = {f.name.replace("_", ".") for f in fields(BrokerConfig) if f.name not in tables}
    assert set(BROKER_CONFIGS) == keys
    assert set(TOPIC_CONFIGS) == set(LogConfig().to_properties())
