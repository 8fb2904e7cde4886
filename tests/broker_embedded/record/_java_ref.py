"""The ground truth in tests/fixtures/kafka-java-ref: MANIFEST.txt parsed into values.

MANIFEST.txt was written by Kafka's Java library (kafka-clients 4.3.0): one line per batch with
every header field, one line per record, then the batch's hex. Keys and values are printed
between double quotes as raw bytes (the control record's key holds NUL bytes), so the file is
read as latin-1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.record.record_batch import Record
from tests.fixture_paths import FIXTURES as SHARED_FIXTURES

FIXTURES = SHARED_FIXTURES
JAVA_REF = FIXTURES / "kafka-java-ref"
KAFKA_GO = FIXTURES / "wire" / "kafka-go"
LOG_DIRS = FIXTURES / "kafka-logdirs"

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
TS_TYPES = {"CreateTime": 0, "LogAppendTime": 1}

_BATCH = re.compile(
    r"^(?P<name>\w+): size=(?P<size>\d+) crc=(?P<crc>\d+) \(0x[0-9a-f]+\) codec=(?P<codec>\w+) "
    r"baseOffset=(?P<base>-?\d+) lastOffset=(?P<last>-?\d+) count=(?P<count>\d+) "
    r"maxTs=(?P<max_ts>-?\d+) tsType=(?P<ts_type>\w+) pid=(?P<pid>-?\d+) "
    r"epoch=(?P<epoch>-?\d+) baseSeq=(?P<seq>-?\d+) txn=(?P<txn>true|false) "
    r"control=(?P<control>true|false) ple=(?P<ple>-?\d+)$"
)
_RECORD = re.compile(
    r'^    offset=(?P<offset>\d+) ts=(?P<ts>-?\d+) key=(?P<key>null|".*?") '
    r'value=(?P<value>null|".*?") headers=\[(?P<headers>.*)\]$',
    re.DOTALL,
)
_HEX = re.compile(r"^    hex=(?P<hex>[0-9a-f]+)$")
_FILE = re.compile(r"^(?P<name>\S+\.log) size=(?P<size>\d+)$")


@dataclass(frozen=True)
class ManifestBatch:
    name: str
    size: int
    crc: int
    codec: int
    base_offset: int
    last_offset: int
    count: int
    max_timestamp: int
    timestamp_type: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    partition_leader_epoch: int
    records: tuple[Record, ...]
    hex: str

    @property
    def path(self) -> Path:
        return JAVA_REF / f"{self.name}.bin"

    def data(self) -> bytes:
        return self.path.read_bytes()


def _quoted(text: str) -> bytes | None:
    return None if text == "null" else text[1:-1].encode("latin-1")


def _headers(text: str) -> tuple[tuple[str, bytes | None], ...]:
    out = []
    for item in filter(None, text.split(";")):
        key, _, value = item.partition("=")
        out.append((key, None if value == "null" else value.encode("latin-1")))
    return tuple(out)


def _batch(match: re.Match[str], records: list[Record], hex_: str) -> ManifestBatch:
    g = match.groupdict()
    return ManifestBatch(
        name=g["name"],
        size=int(g["size"]),
        crc=int(g["crc"]),
        codec=CODECS[g["codec"]],
        base_offset=int(g["base"]),
        last_offset=int(g["last"]),
        count=int(g["count"]),
        max_timestamp=int(g["max_ts"]),
        timestamp_type=TS_TYPES[g["ts_type"]],
        producer_id=int(g["pid"]),
        producer_epoch=int(g["epoch"]),
        base_sequence=int(g["seq"]),
        is_transactional=g["txn"] == "true",
        is_control=g["control"] == "true",
        partition_leader_epoch=int(g["ple"]),
        records=tuple(records),
        hex=hex_,
    )


def parse_manifest() -> tuple[list[ManifestBatch], dict[str, int]]:
    """Every batch of MANIFEST.txt, and the files it lists with their sizes."""
    text = (JAVA_REF / "MANIFEST.txt").read_bytes().decode("latin-1")
    batches: list[ManifestBatch] = []
    files: dict[str, int] = {}
    head: re.Match[str] | None = None
    records: list[Record] = []
    for line in text.split("\n"):
        if m := _BATCH.match(line):
            head, records = m, []
        elif m := _RECORD.match(line):
            key, value = _quoted(m["key"]), _quoted(m["value"])
            records.append(
                Record(int(m["offset"]), int(m["ts"]), key, value, _headers(m["headers"]))
            )
        elif m := _HEX.match(line):
            assert head is not None
            batches.append(_batch(head, records, m["hex"]))
            head = None
        elif m := _FILE.match(line):
            files[m["name"]] = int(m["size"])
    return batches, files


MANIFEST_BATCHES, MANIFEST_FILES = parse_manifest()
BATCHES_BY_NAME = {b.name: b for b in MANIFEST_BATCHES}
