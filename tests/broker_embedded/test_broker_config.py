"""BrokerConfig: conf/broker.toml holds exactly the built-in defaults; files override them; unknown
keys and bad values are InvalidConfigErrors naming the key, the value and the file; a broker
applies its topic defaults to the topics it creates."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.broker_config import DEFAULT_CONFIG_FILE, BrokerConfig, tomllib
from broker_embedded.storage.log_config import CONFIG_NAMES, InvalidConfigError, LogConfig
from broker_embedded.storage.topic_partition import TopicPartition

BROKER_KEYS = {
    "replica.lag.time.max.ms": 30000,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.max.bytes": 1048576,
    "replica.fetch.response.max.bytes": 10485760,
    "replica.fetch.backoff.ms": 1000,
    "fetch.max.bytes": 57671680,
    "log.retention.check.interval.ms": 300000,
    "log.flush.scheduler.interval.ms": 1000,
    "checkpoint.interval.ms": 100,
    "purgatory.max.pending": 10000,
    "num.network.threads": 3,
    "num.io.threads": 8,
    "queued.max.requests": 500,
    "socket.request.max.bytes": 104857600,
    "socket.listen.backlog.size": 50,
    "socket.send.buffer.bytes": 102400,
    "socket.receive.buffer.bytes": 102400,
    # "max.connections": not in the file, its default follows RLIMIT_NOFILE (tested with the
    # server: tests/broker_embedded/server/test_abandoned_and_slow_clients.py)
    "max.connections.per.ip": 2147483647,
    "connections.max.idle.ms": 600000,
    "queued.max.request.bytes": 104857600,
    "queued.max.response.bytes": 67108864,  # not a Kafka key: unsent copied Fetch bytes
    "max.incremental.fetch.session.cache.slots": 1000,
    "fetch.max.pinned.regions": 1024,  # not a Kafka key: this broker's sendfile descriptor bound
    "auto.create.topics.enable": True,
    "num.partitions": 1,
    "default.replication.factor": 1,
    # consumer groups (the group coordinator)
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.max.size": 2147483647,
    "offsets.topic.num.partitions": 50,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.segment.bytes": 104857600,
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "transaction.state.log.num.partitions": 50,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "transaction.state.log.segment.bytes": 104857600,
}


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "broker.toml"
    p.write_text(text, "utf-8")
    return p


def test_conf_file_equals_the_built_in_defaults():
    assert DEFAULT_CONFIG_FILE.name == "broker.toml" and DEFAULT_CONFIG_FILE.parent.name == "conf"
    loaded = BrokerConfig.load(DEFAULT_CONFIG_FILE)
    assert loaded == BrokerConfig()
    assert BrokerConfig.load() == BrokerConfig()
    # Kafka's documented defaults, key by key, in the file and in the dataclass
    raw = tomllib.loads(DEFAULT_CONFIG_FILE.read_text("utf-8"))
    assert raw["broker"] == BROKER_KEYS
    for key, value in BROKER_KEYS.items():
        assert getattr(BrokerConfig(), key.replace(".", "_")) == value
    assert loaded.fetch_max_bytes == 55 * 1024 * 1024
    # every topic default in the file is LogConfig's default
    assert set(raw["topic_defaults"]) <= set(CONFIG_NAMES)
    defaults = LogConfig().to_properties()
    for key, value in raw["topic_defaults"].items():
        assert defaults[key] == str(value), key
    assert loaded.topic_defaults == LogConfig()


def test_file_overrides_broker_and_topic_defaults(tmp_path):
    path = write(
        tmp_path,
        '[broker]\n"fetch.max.bytes" = 1000\n"checkpoint.interval.ms" = 5\n'
        '[topic_defaults]\n"segment.bytes" = 2048\n"cleanup.policy" = "compact"\n',
    )
    cfg = BrokerConfig.load(path)
    assert cfg.fetch_max_bytes == 1000
    assert cfg.checkpoint_interval_ms == 5
    assert cfg.replica_lag_time_max_ms == 30000
    assert cfg.topic_defaults == dataclasses.replace(
        LogConfig(), segment_bytes=2048, cleanup_policy="compact"
    )
    # an empty file is all defaults
    assert BrokerConfig.load(write(tmp_path, "")) == BrokerConfig()


def test_broker_applies_its_topic_defaults(tmp_path):
    cfg = BrokerConfig.load(
        write(tmp_path, '[topic_defaults]\n"segment.bytes" = 2048\n"retention.ms" = 1000\n')
    )
    with Broker(tmp_path / "logs", config=cfg, create=True) as broker:
        broker.create_topic("t", config={"retention.ms": 5000})
        effective = broker.topic_config("t")
        assert effective["segment.bytes"] == "2048"  # broker default
        assert effective["retention.ms"] == "5000"  # the topic's own override wins
        assert effective["cleanup.policy"] == "delete"
        assert dict(broker.describe_topic("t").config) == {"retention.ms": "5000"}
        log = broker.log_manager.get_log(TopicPartition("t", 0))
        assert log.config.segment_bytes == 2048 and log.config.retention_ms == 5000


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ('[broker]\n"no.such.key" = 1\n', ["unknown broker config 'no.such.key'"]),
        ('[broker]\n"fetch.max.bytes" = -1\n', ["-1", "fetch.max.bytes"]),
        ('[broker]\n"fetch.max.bytes" = "big"\n', ["'big'", "fetch.max.bytes"]),
        ('[broker]\n"fetch.max.bytes" = true\n', ["True", "fetch.max.bytes"]),
        ('[broker]\n"fetch.max.bytes" = 1.5\n', ["1.5", "fetch.max.bytes"]),
        ('[broker]\n"num.io.threads" = 0\n', ["0", "num.io.threads", ">= 1"]),
        ('[broker]\n"queued.max.requests" = 0\n', ["0", "queued.max.requests", ">= 1"]),
        ('[broker]\n"num.partitions" = 0\n', ["0", "num.partitions", ">= 1"]),
        ('[broker]\n"auto.create.topics.enable" = 1\n', ["1", "true or false"]),
        ("[brokers]\n", ["unknown section", "brokers"]),
        ("broker = 5\n", ["[broker] must be a table"]),
        ('[topic_defaults]\n"segment.bytes" = "x"\n', ["[topic_defaults]", "segment.bytes", "'x'"]),
        ('[topic_defaults]\n"no.such.config" = 1\n', ["unknown config 'no.such.config'"]),
        ('[topic_defaults]\n"min.cleanable.dirty.ratio" = 2.0\n', ["min.cleanable.dirty.ratio"]),
        ("[broker\n", ["is not valid TOML"]),
        (
            '[broker]\n"remote.log.storage.system.enable" = true\n',
            ["remote.log.storage.system.enable", "[rsm_config] has no location"],
        ),
        ('[rsm_config]\n"fs.s3a.endpiont" = "x"\n', ["unknown [rsm_config] key 'fs.s3a.endpiont'"]),
        ('[rsm_config]\n"location" = "/data/tiered"\n', ["'/data/tiered' is not an object store"]),
        ('[rsm_config]\n"fs.s3a.secret.key" = 7\n', ["fs.s3a.secret.key must be a string"]),
    ],
)
def test_bad_files_name_the_key_value_and_file(tmp_path, text, needles):
    path = write(tmp_path, text)
    with pytest.raises(InvalidConfigError) as e:
        BrokerConfig.load(path)
    message = str(e.value)
    assert str(path) in message
    for needle in needles:
        assert needle in message


def test_missing_file(tmp_path):
    with pytest.raises(InvalidConfigError, match="does not exist"):
        BrokerConfig.load(tmp_path / "nope.toml")


def test_group_coordinator_keys_load_and_group_max_size_must_be_positive(tmp_path):
    text = '[broker]\n"group.initial.rebalance.delay.ms" = 0\n"group.max.size" = 3\n'
    cfg = BrokerConfig.load(write(tmp_path, text))
    assert (cfg.group_initial_rebalance_delay_ms, cfg.group_max_size) == (0, 3)
    with pytest.raises(InvalidConfigError, match="group.max.size"):
        BrokerConfig.load(write(tmp_path, '[broker]\n"group.max.size" = 0\n'))


def test_tiered_storage_settings_load_and_keep_their_secret_out_of_the_repr(tmp_path):
    path = write(
        tmp_path,
        '[broker]\n"remote.log.storage.system.enable" = true\n'
        '"remote.log.manager.task.interval.ms" = 250\n[rsm_config]\n'
        '"location" = "s3://b/p"\n"fs.s3a.secret.key" = "hush-7"\n',
    )
    cfg = BrokerConfig.load(path)
    assert (cfg.remote_log_storage_system_enable, cfg.remote_log_manager_task_interval_ms) == (
        True,
        250,
    )
    assert dict(cfg.rsm_config) == {"location": "s3://b/p", "fs.s3a.secret.key": "hush-7"}
    assert "hush-7" not in repr(cfg)
