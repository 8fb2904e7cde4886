"""Fast mutation and property tests (the CI share of issue 11's fuzz campaign, benchmarks/fuzz.py).

Mutated segments of every codec and format (v2 none/gzip/snappy/lz4/zstd, magic 0 and 1, the
fixtures' real batches) through both decoders, which must agree or both raise domain errors naming
the file, and never lose records silently; option maps through ``KafkaSourceOptions.parse``; one
file of a broker-written log dir mutated, through the read-only view, ``consume`` and ``dump
--verify``. The defects issue 11 lists have a test each here too (an impossible length in a
middle segment, deep JSON options, hostile ``subscribePattern`` values).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks._fuzz_corpus import all_seeds, builtin_seeds
from benchmarks._fuzz_logdir import LogDirTarget, mutate_file
from benchmarks._fuzz_mutators import MUTATORS, mutate
from benchmarks._fuzz_options import check_options
from benchmarks._fuzz_oracle import bounded, check_decoders, check_no_loss

SEEDS = all_seeds()
SOURCE = "00000000000000000000.log"
FAST = settings(
    max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)


def decoders(seed, mutant) -> None:
    with bounded(10):
        rows = check_decoders(mutant.data, SOURCE)
        if rows is not None:
            check_no_loss(seed, mutant, rows, prefix_ok=False)


def test_the_seeds_read_as_built() -> None:
    names = {s.name for s in builtin_seeds()}
    assert {f"v2/{c}" for c in ("none", "gzip", "snappy", "lz4", "zstd")} <= names
    assert {"magic0/none", "magic0/gzip", "magic1/lz4", "magic1/snappy"} <= names
    for seed in SEEDS:
        assert check_decoders(seed.data, SOURCE) == list(seed.rows), seed.name
    v2 = next(s for s in SEEDS if s.name == "v2/zstd")
    assert len(v2.rows) == 20 and v2.rows[0][:3] == (0, b"key-0", b"value 0 ")


@FAST
@given(st.sampled_from(SEEDS), st.integers(0, 2**32 - 1))
def test_mutated_segments_agree_or_fail_cleanly(seed, n: int) -> None:
    rng = random.Random(n)
    decoders(seed, mutate(seed, rng))


@pytest.mark.parametrize("mutator", MUTATORS, ids=lambda m: m.__name__)
def test_every_mutator_on_every_builtin_seed(mutator) -> None:
    rng = random.Random(7)
    for seed in builtin_seeds():
        for _ in range(15):
            decoders(seed, mutator(seed, rng))


def test_a_bit_flip_in_a_record_is_a_crc_error_naming_the_file() -> None:
    seed = next(s for s in SEEDS if s.name == "v2/gzip")
    data = bytearray(seed.data)
    data[100] ^= 0x10
    assert check_decoders(bytes(data), SOURCE) is None  # both raised a domain error
    from benchmarks._fuzz_oracle import rows_columnar

    with pytest.raises(Exception, match=f"CRC mismatch.*|.*{SOURCE}.*"):
        rows_columnar(bytes(data), SOURCE)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.integers(0, 2**32 - 1))
def test_option_maps_parse_or_name_the_option(n: int) -> None:
    from benchmarks._fuzz_options import random_options

    rng = random.Random(n)
    options = random_options(rng)
    streaming = rng.choice((False, True, None))
    with bounded(10):
        check_options(options, streaming)


@pytest.mark.parametrize(
    "name", ["startingOffsets", "endingOffsets", "assign", "startingOffsetsByTimestamp"]
)
def test_deep_json_is_an_option_error(name: str) -> None:
    options = {"path": "/tmp/x", "subscribe": "t", name: "[" * 100_000}
    if name == "assign":
        del options["subscribe"]
    assert check_options(options, False) == "error"


@pytest.mark.parametrize("pattern", ["a{99999999999}", "(" * 500 + ")" * 500])
def test_hostile_subscribe_pattern_is_an_option_error(pattern: str) -> None:
    assert check_options({"path": "/tmp/x", "subscribePattern": pattern}, False) == "error"


# -- a real log dir with one file mutated ----------------------------------------------------------


@pytest.fixture(scope="module")
def log_dir_target(tmp_path_factory) -> LogDirTarget:
    base = tmp_path_factory.mktemp("fuzz-logdir")
    target = LogDirTarget.create(base)
    yield target
    shutil.rmtree(base, ignore_errors=True)


def test_the_template_reads_whole(log_dir_target: LogDirTarget) -> None:
    from benchmarks._fuzz_logdir import read_consume, read_view
    from broker_embedded.storage.topic_partition import TopicPartition

    for tp, rows in log_dir_target.template.rows.items():
        assert read_view(log_dir_target.work, tp) == list(rows)
        assert read_consume(log_dir_target.work, tp) == list(rows)
    assert len(log_dir_target.template.rows[TopicPartition("fz", 0)]) == 105
    assert len(log_dir_target.template.segments[TopicPartition("fz", 0)]) == 4


def _run(target: LogDirTarget, path: Path, data: bytes, kind: str) -> list:
    from benchmarks._fuzz_corpus import make_seed
    from benchmarks._fuzz_mutators import Mutant

    seed = make_seed(str(path.relative_to(target.template.path)), path.read_bytes())
    mutant = Mutant(
        data,
        kind,
        (len(data), len(seed.data)) if kind == "truncate" else (8, 12),
        lossy=kind == "truncate",
    )
    with bounded(60):
        return target.run_mutant(path, seed, mutant, None)


def test_impossible_length_in_a_middle_segment_fails_every_reader(log_dir_target) -> None:
    from broker_embedded.storage.topic_partition import TopicPartition

    path = log_dir_target.template.segments[TopicPartition("fz", 0)][1]
    data = bytearray(path.read_bytes())
    data[8:12] = (0x7FFFFFFF).to_bytes(4, "big")
    assert _run(log_dir_target, path, bytes(data), "forge_length") == []


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.integers(0, 2**32 - 1))
def test_mutated_log_dir_files(log_dir_target: LogDirTarget, n: int) -> None:
    rng = random.Random(n)
    path = log_dir_target.pick(rng)
    seed, mutant = mutate_file(log_dir_target.template, path, rng)
    with bounded(60):
        findings = log_dir_target.run_mutant(path, seed, mutant, None)
    assert not findings, [f.detail[:500] for _, f in findings]


# -- the oracle's allowed difference and the inflation budget's early stops ------------------------


def _v2_batch(timestamp: int, compression: int = 0) -> bytes:
    from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(0, compression)
    builder.append(None, timestamp, b"k", b"v")
    return builder.build()


def test_a_timestamp_beyond_spark_is_the_one_allowed_difference() -> None:
    """The columnar decoder refuses a timestamp whose microseconds overflow int64; the Python
    decoder returns it: both outcomes are allowed, and nothing else is."""
    from benchmarks._fuzz_oracle import rows_columnar, rows_python
    from broker_embedded.errors import CorruptRecordError
    from broker_embedded.record.decode_kernel import MAX_TIMESTAMP_MS

    for ts in (MAX_TIMESTAMP_MS + 1, 2**62):
        data = _v2_batch(ts)
        assert rows_python(data, SOURCE) == [(0, b"k", b"v", ())]
        with pytest.raises(CorruptRecordError, match=f"timestamp {ts} ms is out of Spark's"):
            rows_columnar(data, SOURCE)
        assert check_decoders(data, SOURCE) is None
    assert check_decoders(_v2_batch(MAX_TIMESTAMP_MS), SOURCE) == [(0, b"k", b"v", ())]


def test_a_corrupt_batch_after_an_early_stop_is_read_by_the_next_call() -> None:
    """The inflation budget takes a compressed batch that does not inflate for one too large
    for what is left, stops the call there, and the next call reports it: the oracle goes on
    as the decoder's callers do (a forged codec id 7 with its CRC recomputed)."""
    from benchmarks._fuzz_oracle import rows_columnar
    from broker_embedded.errors import CorruptRecordError
    from broker_embedded.record.batch_layout import ATTRIBUTES_OFFSET, CRC_OFFSET
    from broker_embedded.record.record_batch import crc32c_of, set_base_offset

    first = _v2_batch(5, compression=1)
    second = bytearray(_v2_batch(6, compression=1))
    set_base_offset(second, 1)
    second[ATTRIBUTES_OFFSET + 1] |= 0x07
    second[CRC_OFFSET:ATTRIBUTES_OFFSET] = crc32c_of(second[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    data = first + bytes(second)
    message = f"in {SOURCE} at byte {len(first)} .*unknown compression codec id 7"
    with pytest.raises(CorruptRecordError, match=message):
        rows_columnar(data, SOURCE)
    assert check_decoders(data, SOURCE) is None


def test_a_stacked_lying_count_skips_entries_too_short_for_a_count() -> None:
    """A first mutation can leave a v2 entry shorter than its header: the campaign's second
    mutation raised struct.error reading a count there."""
    from benchmarks._fuzz_corpus import Seed, entry_table
    from benchmarks._fuzz_mutators import lying_count

    short = bytearray(40)
    short[8:12] = (28).to_bytes(4, "big")
    short[16] = 2
    whole = _v2_batch(5)
    data = bytes(short) + whole
    seed = Seed("stacked", data, (), entry_table(data))
    assert seed.entries == ((0, 2), (40, 2))
    for n in range(20):
        mutant = lying_count(seed, random.Random(n))
        assert mutant.touched == (40 + 23, 40 + 61) and mutant.data[:40] == bytes(short)
