"""``kafkalog compact --report`` on a real full disk (a size-limited tmpfs, tests/tmpfs_mount.py):
the partition whose cleaned segment does not fit fails alone, with exit status 1 and a report
naming the partition, the file and "No space left on device"; no ``.cleaned`` or ``.swap`` file
is left; the partition's files are byte for byte as before; and a rerun once space is back
compacts it. (A disk that runs out after a group was swapped in cannot be set up here: each swap
frees more than the next group's cleaned segment takes.)"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.tmpfs_mount import fill_inodes_leaving, fill_leaving, tmpfs

from ._compaction_logdirs import TopicModel, build_compacted, partition_files
from .test_compaction_job import KAFKALOG, ROOT, assert_compacted, read_partition, write_config

MiB = 1 << 20


def _compact(config: Path, report: Path) -> tuple[int, dict, str]:
    done = subprocess.run(
        [str(KAFKALOG), "compact", "--config", str(config), "--report", str(report)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    return done.returncode, json.loads(report.read_text()), done.stdout + done.stderr


def _leftovers(log_dir: Path) -> list[str]:
    return sorted(
        p.name
        for p in (log_dir / "profiles-0").iterdir()
        if p.name.endswith((".cleaned", ".swap", ".deleted"))
    )


@pytest.mark.parametrize(
    ("full", "left", "named"),
    [
        # no page for the lock's holder line (or, where one is free, for the cleaned segment)
        ("bytes", 0, (".kafkalog-cleaning/profiles-0.lock", "0.log.cleaned")),
        ("bytes", 8 << 10, (".cleaned",)),  # the lock fits, the cleaned segment does not
        ("inodes", 0, (".kafkalog-cleaning",)),  # not even the cleaning locks' directory
        ("inodes", 3, (".cleaned",)),  # the lock files and their directory, no cleaned segment
    ],
    ids=["no-byte-free", "8-KiB-free", "no-inode-free", "3-inodes-free"],
)
def test_a_full_disk_fails_the_partition_cleanly_and_a_rerun_compacts_it(
    tmp_path: Path, full: str, left: int, named: tuple[str, ...]
) -> None:
    with tmpfs(4 * MiB, parent=tmp_path, inodes=400) as disk:
        log_dir = disk / "d"
        model, _ = build_compacted(log_dir, partitions=1, extra_topics=False)
        before = partition_files(log_dir, "profiles", 0)
        filler = (fill_inodes_leaving if full == "inodes" else fill_leaving)(disk, left)
        config = write_config(tmp_path / "c.toml", log_dir)
        status, report, output = _compact(config, tmp_path / "report.json")
        assert status == 1, output
        assert report["exit_status"] == 1
        [p] = report["partitions"]
        assert (p["topic"], p["partition"], p["status"]) == ("profiles", 0, "failed"), p
        assert "No space left on device" in p["reason"], p
        assert str(log_dir) in p["reason"], p
        assert any(name in p["reason"] for name in named), p
        assert "Traceback" not in output
        assert _leftovers(log_dir) == []
        assert partition_files(log_dir, "profiles", 0) == before
        rows = [(0, off, k, v) for off, k, v in read_partition(log_dir, "profiles", 0)]
        produced = TopicModel({0: model.records[0]})
        assert {(q, k): v for q, _, k, v in rows} == {
            key: value for key, (_, value) in produced.latest().items()
        }

        if filler.is_dir():
            shutil.rmtree(filler)
        else:
            filler.unlink()
        status, report, output = _compact(config, tmp_path / "report.json")
        assert status == 0, output
        assert [q["status"] for q in report["partitions"]] == ["cleaned"]
        rows = [(0, off, k, v) for off, k, v in read_partition(log_dir, "profiles", 0)]
        assert_compacted(rows, produced)
        assert _leftovers(log_dir) == []
