"""``kafkalog upload`` against a real S3 server (SeaweedFS, the session's ``s3``): the stored log
dir reads as the local one, a rerun skips what is there and verified, resumes an interrupted
upload, repairs a damaged object, refuses a different segment unless --replace, and a missing
bucket or a wrong secret is an error naming them (without the secret)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from broker_embedded.storage.object_store import StoreLocation
from broker_embedded.storage.object_store_fetch_source import (
    ObjectStoreSource,
    UnsupportedOnObjectStoreError,
)
from broker_embedded.storage.remote_log_segment_metadata import RemoteLogSegmentMetadata
from broker_embedded.storage.topic_partition import TopicPartition
from tests.datasource.test_object_store_read import batches
from tests.fixture_paths import FIXTURES
from tests.seaweedfs import S3Server

ROLLED = FIXTURES / "kafka-logdirs" / "kafka-bitnami-rolled"  # 4 partitions, 5 segments
META = "__cluster_metadata-0"
SEGMENTS = sorted(
    f"{p.parent.name}/{int(p.stem)}" for p in ROLLED.glob("*-*/*.log")
)  # what a first upload reports


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return Path(shutil.copytree(ROLLED, tmp_path / "logdir"))


def conf(s3: S3Server) -> list[str]:
    return [f"--conf={k}={v}" for k, v in s3.options().items()]


def summary(out: str) -> str:
    return out.strip().splitlines()[-1].split(": ", 1)[1]


def same_reads(location: StoreLocation, log_dir: Path) -> None:
    """Every partition fetches the same batches from the store as from ``log_dir``."""
    local, remote = LogDirSource(str(log_dir)).open(), ObjectStoreSource(location).open()
    assert remote.topics() == local.topics()
    for topic, partitions in local.topics().items():
        for tp in (TopicPartition(topic, p) for p in partitions):
            assert batches(remote, tp, 1 << 20) == batches(local, tp, 1 << 20), tp


def test_upload_then_rerun_skips_resumes_and_repairs(cli, s3: S3Server, log_dir: Path) -> None:
    to = f"s3://{s3.new_bucket('upload')}/kafka/a"
    location = StoreLocation(to, s3.settings)
    code, out, err = cli(f"upload --log-dir {log_dir} --to {to}", *conf(s3))
    assert (code, err) == (0, "")
    assert summary(out).startswith(f"{len(SEGMENTS)} segments uploaded, 0 repaired, 0 already")
    assert sorted(line.removeprefix("uploaded ") for line in out.splitlines()[:-1]) == SEGMENTS
    same_reads(location, log_dir)
    code, out, err = cli(f"upload --log-dir {log_dir} --to {to}", *conf(s3))
    assert err == ""
    skipped = f"0 segments uploaded, 0 repaired, {len(SEGMENTS)} already there and verified"
    assert (code, summary(out).split(";")[0]) == (0, skipped)

    # an interrupted run: the last segment's manifest not yet written, its .log cut short
    store = location.open()
    store.delete(f"{META}/{RemoteLogSegmentMetadata.name_of(14667)}")
    store.write(f"{META}/{14667:020d}.log", b"partial")
    # damage the store behind the uploader's back: a shorter index, a same-size flipped log
    index = f"{META}/{0:020d}.index"
    store.write(index, store.read(index)[:-8])
    data = bytearray(store.read(name := f"product-created-events-topic-2/{0:020d}.log"))
    data[100] ^= 0xFF
    store.write(name, bytes(data))
    code, out, _ = cli(f"upload --log-dir {log_dir} --to {to} --verify", *conf(s3))
    assert code == 0 and summary(out).startswith(
        f"1 segments uploaded, 2 repaired, {len(SEGMENTS) - 3} already"
    )
    same_reads(location, log_dir)


def test_a_different_segment_is_refused_unless_replace(cli, s3: S3Server, log_dir: Path) -> None:
    to = f"s3://{s3.new_bucket('refuse')}/p"
    assert cli(f"upload --log-dir {log_dir} --to {to}", *conf(s3))[0] == 0
    segment = log_dir / "product-created-events-topic-2" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF  # a record's last byte: another segment of the same size
    segment.write_bytes(bytes(data))
    code, out, err = cli(f"upload --log-dir {log_dir} --to {to}", *conf(s3))
    key = f"product-created-events-topic-2/{0:020d}.segment.json"
    assert code == 1 and f"key 'p/{key}' describes another segment than {segment}" in err
    code, out, _ = cli(f"upload --log-dir {log_dir} --to {to} --replace", *conf(s3))
    assert code == 0 and summary(out).startswith("0 segments uploaded, 1 repaired")
    same_reads(StoreLocation(to, s3.settings), log_dir)
    # a stored segment inside the partition's range that the log dir lacks (the cleaner merged
    # it): --replace deletes it, manifest and objects
    store = StoreLocation(to, s3.settings).open()
    stored = RemoteLogSegmentMetadata.from_json(store.read(key), key)
    store.write(f"product-created-events-topic-2/{1:020d}.log", b"old")
    store.write(
        f"product-created-events-topic-2/{1:020d}.segment.json",
        replace(stored, base_offset=1, files=()).to_json(),
    )
    code, out, _ = cli(f"upload --log-dir {log_dir} --to {to} --replace", *conf(s3))
    assert code == 0 and out.splitlines()[:-1] == [
        "deleted product-created-events-topic-2/1 (stale: not in the log dir)"
    ]
    assert summary(out).startswith(
        f"0 segments uploaded, 0 repaired, {len(SEGMENTS)} already there and verified, "
        "1 stale ones deleted; "
    )
    assert not [n for n in store.list() if n.startswith(f"product-created-events-topic-2/{1:020d}")]
    same_reads(StoreLocation(to, s3.settings), log_dir)


def test_missing_bucket_and_wrong_secret(cli, s3: S3Server, log_dir: Path) -> None:
    code, _, err = cli(f"upload --log-dir {log_dir} --to s3://no-such-kafkalog-bucket/p", *conf(s3))
    assert code == 1 and "no bucket 'no-such-kafkalog-bucket'" in err
    to = f"s3://{s3.new_bucket('secret')}/p"
    wrong = [c for c in conf(s3) if "secret.key" not in c] + ["--conf=fs.s3a.secret.key=WRONG1"]
    code, out, err = cli(f"upload --log-dir {log_dir} --to {to}", *wrong)
    assert code == 1 and f"listing failed at bucket {to[5:].split('/')[0]!r} key 'p/'" in err
    assert "signature" in err and "WRONG1" not in err + out
    code, _, err = cli(f"upload --log-dir {log_dir} --to {to} --conf fs.s3a.secret=x")
    assert code == 2 and "--conf 'fs.s3a.secret'" in err
    code, out, err = cli(f"upload --log-dir {log_dir} --to s3://AKIAX:WRONG2@b/p")
    assert code == 2 and "'s3://b/p' is given with credentials before its bucket" in err
    assert "WRONG2" not in err + out and "AKIAX" not in err + out


def test_a_log_dir_a_broker_holds_goes_without_its_active_segments(cli, log_dir: Path) -> None:
    """Through a file:// store (any file system pyarrow opens): no S3 server needed."""
    from broker_embedded.storage.log_dir_lock import LogDirLock

    to = (log_dir.parent / "store").as_uri()
    with LogDirLock.acquire(log_dir, "a running broker"):
        code, out, _ = cli(f"upload --log-dir {log_dir} --to {to}")
    assert code == 0 and out.splitlines()[:-1] == [f"uploaded {META}/0"]  # the rest are active
    remote = ObjectStoreSource(StoreLocation(to)).open()
    meta = TopicPartition("__cluster_metadata", 0)
    assert remote.partition(meta).high_watermark == 14667  # below the active segment
    refused = "read_committed needs the last stable offset of __cluster_metadata-0"
    with pytest.raises(UnsupportedOnObjectStoreError, match=refused):
        remote.list_offset(meta, -1, IsolationLevel.READ_COMMITTED)
    assert remote.topics() == LogDirSource(str(log_dir)).open().topics()
    local = LogDirSource(str(log_dir)).open()
    assert batches(remote, meta, 1 << 16) == [
        b for b in batches(local, meta, 1 << 16) if b[1] < 14667
    ]


def test_an_upload_killed_mid_segment_completes_on_a_rerun(cli, s3: S3Server, log_dir) -> None:
    """``kafkalog upload`` SIGKILLed while a segment's bytes are on the wire (its PUT held by a
    proxy): the rerun uploads what is missing and the store reads as the log dir."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.s3_proxy import FaultProxy

    root = Path(__file__).resolve().parents[2]
    to = f"s3://{s3.new_bucket('killed')}/kafka/a"
    with FaultProxy(s3.endpoint) as proxy:
        proxy.inject("stall", matching="topic-1/00000000000000000000.log?partNumber")
        options = {**s3.options(), "fs.s3a.endpoint": proxy.endpoint}
        command = [
            sys.executable,
            "-m",
            "spark_kafkalog.cli",
            "upload",
            "--log-dir",
            str(log_dir),
            "--to",
            to,
            *(f"--conf={k}={v}" for k, v in options.items()),
        ]
        child = subprocess.Popen(
            command,
            env={**os.environ, "PYTHONPATH": str(root)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            while not proxy.injected and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert proxy.injected == 1, child.poll()
        finally:
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=30)
    code, out, err = cli(f"upload --log-dir {log_dir} --to {to}", *conf(s3))
    assert (code, err) == (0, "")
    uploaded, skipped = int(summary(out).split()[0]), int(summary(out).split(", ")[2].split()[0])
    assert uploaded >= 1 and uploaded + skipped == len(SEGMENTS), out
    same_reads(StoreLocation(to, s3.settings), log_dir)
