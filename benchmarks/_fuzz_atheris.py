"""Coverage-guided fuzzing of the Python parsers with atheris (optional: ``pip install atheris``).

    python -m benchmarks.fuzz --atheris {records,legacy,index,checkpoint,options} --minutes N

Each harness takes libFuzzer's bytes and feeds one parser, accepting a domain error
(``KafkaLogError``, which includes the option and checkpoint errors) and letting anything else
escape, which libFuzzer reports as a crash with the input saved (``crash-<sha1>`` in ``--out``):

- ``records``: the bytes as a run of entries, every batch validated and its records read
  (``records.iter_batches``, ``RecordBatch``); the columnar decoder's compiled kernels cannot
  be instrumented (numba compiles their Python source), the campaign covers them;
- ``legacy``: the same, the bytes behind a magic 1 entry header, so that coverage goes to the
  legacy (magic 0/1) message-set parser;
- ``index``: the bytes as an offset index and a time index (``from_bytes``, lookups);
- ``checkpoint``: the bytes as an offset checkpoint and a leader epoch checkpoint (``parse``);
- ``options``: the bytes split into a small option map for ``KafkaSourceOptions.parse``.

Every loaded Python function is instrumented (``atheris.instrument_all``). libFuzzer
runs until ``-max_total_time``; the exit status is libFuzzer's (non-zero after a crash).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path


def run(target: str, minutes: float, out: str) -> int:
    import atheris

    from broker_embedded.errors import KafkaLogError
    from broker_embedded.record import records
    from broker_embedded.storage import leader_epoch_checkpoint, offset_checkpoint
    from broker_embedded.storage.offset_index import OffsetIndex
    from broker_embedded.storage.time_index import TimeIndex
    from datasource.kafka_source_options import OPTION_NAMES, KafkaSourceOptions

    atheris.instrument_all()  # the campaign's imports already loaded these modules

    def walk(data: bytes) -> None:
        for batch in records.iter_batches(data, "fuzz.log", tail="error"):
            batch.ensure_valid()
            list(batch.records())

    def records_one(data: bytes) -> None:
        try:
            walk(data)
        except KafkaLogError:
            pass

    def legacy_one(data: bytes) -> None:
        body = b"\x01" + data  # magic 1, then the fuzzer's attributes, timestamp, key, value
        entry = struct.pack(">qiI", 0, len(body) + 4, 0) + body
        records_one(entry)

    def index_one(data: bytes) -> None:
        for cls in (OffsetIndex, TimeIndex):
            try:
                index = cls.from_bytes(data, 100, source="fuzz.index")
                index.sanity_check()
                index.lookup(150)
            except KafkaLogError:
                pass

    def checkpoint_one(data: bytes) -> None:
        for cls in (
            offset_checkpoint.OffsetCheckpointFile,
            leader_epoch_checkpoint.LeaderEpochCheckpointFile,
        ):
            try:
                cls(Path(out) / "fuzz-checkpoint").parse(data)
            except KafkaLogError:
                pass

    names = sorted(OPTION_NAMES.values())

    def options_one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        options = {"path": "/tmp/x", "subscribe": "t"}
        for _ in range(fdp.ConsumeIntInRange(0, 4)):
            options[names[fdp.ConsumeIntInRange(0, len(names) - 1)]] = fdp.ConsumeUnicode(64)
        try:
            KafkaSourceOptions.parse(options, streaming=fdp.PickValueInList([False, True, None]))
        except KafkaLogError:
            pass

    harness = {
        "records": records_one,
        "legacy": legacy_one,
        "index": index_one,
        "checkpoint": checkpoint_one,
        "options": options_one,
    }[target]
    corpus = Path(out) / f"corpus-{target}"
    corpus.mkdir(parents=True, exist_ok=True)
    if target == "records":  # start from the campaign's seeds: every codec and format
        from benchmarks._fuzz_corpus import all_seeds

        for i, seed in enumerate(all_seeds()):
            (corpus / f"seed-{i}").write_bytes(seed.data)
    args = [
        sys.argv[0],
        str(corpus),
        f"-max_total_time={int(minutes * 60)}",
        f"-artifact_prefix={out}/",
        "-timeout=20",
        "-rss_limit_mb=2048",
        "-max_len=65536",
    ]
    atheris.Setup(args, harness)
    atheris.Fuzz()
    return 0
