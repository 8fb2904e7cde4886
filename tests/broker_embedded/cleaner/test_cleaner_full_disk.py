"""The broker's cleaner thread on a real full disk (a size-limited tmpfs, tests/tmpfs_mount.py):
its cleaned segment does not fit, so each pass fails; it logs one warning for the episode (no
traceback), backs off ``log.cleaner.backoff.ms`` and retries, leaves the partition's files as
they were and the partition cleanable; once space is back the next pass compacts the log."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

from broker_embedded.cleaner.log_cleaner_manager import LogCleanerConfig
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.topic_config_file import TopicEntry
from broker_embedded.storage.topic_partition import TopicPartition
from tests.tmpfs_mount import fill_leaving, tmpfs

from ._workload import Writer
from .test_cleaner import check_against_model, seal

MiB = 1 << 20
TP = TopicPartition("t", 0)
CLEANER_LOGGER = "broker_embedded.cleaner"
DEADLINE_S = 120


def _segment_files(d: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(d.iterdir())
        if p.suffix
        in (".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".cleaned", ".swap")
    }


def _wait_for(what: str, condition) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {DEADLINE_S} s"
        time.sleep(0.05)


def test_the_cleaner_thread_on_a_full_disk_logs_once_backs_off_and_cleans_once_space_is_back(
    tmp_path: Path, caplog
) -> None:
    caplog.set_level(logging.DEBUG, logger=CLEANER_LOGGER)
    with tmpfs(4 * MiB, parent=tmp_path) as disk:
        log_dir = disk / "logdir"
        with LogManager(log_dir, create=True, cleaner_config=LogCleanerConfig(threads=0)) as lm:
            config = {"cleanup.policy": "compact", "segment.bytes": str(64 << 10)}
            lm.put_topic("t", TopicEntry(uuid.UUID(int=1), 1, 1, config))
            lg = lm.get_or_create_log(TP)
            writer = Writer(lg, 27, keys=1 << 30)  # (almost) every key once: nothing to drop
            for _ in range(1500):
                writer.random_batch(0)
            seal(lg)
        before = _segment_files(log_dir / TP.dir_name)
        filler = fill_leaving(disk, 8 << 10)  # a cleaned group (up to 64 KiB) does not fit

        def records(level: int) -> list[logging.LogRecord]:
            return [
                r
                for r in caplog.records
                if r.name.startswith(CLEANER_LOGGER) and r.levelno >= level
            ]

        cleaner_config = LogCleanerConfig(dedupe_buffer_size=1 << 20, backoff_ms=50)
        with LogManager(log_dir, cleaner_config=cleaner_config) as lm:
            _wait_for("five failed passes", lambda: len(records(logging.DEBUG)) >= 5)
            [warning] = records(logging.WARNING)
            text = warning.getMessage()
            assert "No space left on device" in text and TP.dir_name in text, text
            assert ".cleaned" in text and "50 ms" in text, text
            assert all(r.exc_info is None for r in records(logging.DEBUG))
            assert TP not in lm.cleaner.manager.uncleanable_partitions
            assert _segment_files(log_dir / TP.dir_name) == before

            filler.unlink()
            _wait_for(
                "the log cleaned once space is back",
                lambda: lm.cleaner.manager.all_cleaner_checkpoints().get(TP),
            )
            assert lm.cleaner.manager.all_cleaner_checkpoints()[TP] == (
                lm.get_log(TP).active_segment_base_offset
            )
            check_against_model(lm.get_log(TP), writer)
            [warning_again] = records(logging.WARNING)
            assert warning_again is warning
            assert any("a pass succeeded after" in r.getMessage() for r in records(logging.INFO))
        assert not [
            p
            for p in (log_dir / TP.dir_name).iterdir()
            if p.name.endswith((".cleaned", ".swap", ".deleted"))
        ]
