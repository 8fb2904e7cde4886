"""kcat (Debian's package: a librdkafka command-line client of its own version) produces and
consumes over the wire; what it reads back, and what reached the log dir (read by kafka-python
after shutdown), equal what it sent. Skipped where kcat is not installed."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.broker_embedded.server._serve import log_records, served

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (apt install kcat)")
TIMEOUT_S = 60


def kcat(bootstrap: str, *args: str, stdin: bytes = b"") -> bytes:
    proc = subprocess.run(
        [KCAT, "-b", bootstrap, "-X", "socket.timeout.ms=10000", *args],
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return proc.stdout


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produces_and_consumes_every_codec(tmp_path, codec):
    lines = [f"key-{i}:{codec} value {i} ".encode() * (1 + i % 3) for i in range(50)]
    sent = [tuple(line.split(b":", 1)) for line in lines]
    with served(tmp_path) as s:
        s.broker.create_topic("t", 1)
        kcat(
            s.bootstrap,
            "-P",
            "-t",
            "t",
            "-p",
            "0",
            "-K",
            ":",
            "-z",
            codec,
            "-H",
            "origin=kcat",
            "-X",
            "acks=all",
            stdin=b"\n".join(lines) + b"\n",
        )
        out = kcat(
            s.bootstrap, "-C", "-t", "t", "-p", "0", "-o", "beginning", "-e", "-f", "%o|%k|%s|%h\n"
        )
    read = [line.split(b"|") for line in out.splitlines()]
    assert [(int(o), k, v) for o, k, v, _ in read] == [(i, k, v) for i, (k, v) in enumerate(sent)]
    assert {h for *_, h in read} == {b"origin=kcat"}
    on_disk = log_records(tmp_path, "t", 0)
    assert [(o, k, v, h) for o, k, v, h in on_disk] == [
        (i, k, v, (("origin", b"kcat"),)) for i, (k, v) in enumerate(sent)
    ]


def test_kcat_lists_metadata(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("a", 3)
        out = kcat(s.bootstrap, "-L", "-J")
    meta = json.loads(out)
    (topic,) = [t for t in meta["topics"] if t["topic"] == "a"]
    assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1, 2]
    assert all(p["leader"] == meta["brokers"][0]["id"] for p in topic["partitions"])
