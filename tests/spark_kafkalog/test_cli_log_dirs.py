"""What ``--log-dir`` may name (issue 11 defects 6 and 7): reading commands never make a log dir.

Every reading command, given a missing path, an empty directory, a directory of unrelated files
or a file, fails with one line naming the path (exit 1) and leaves the path as it was; only
``topics create`` makes a log dir, of a missing path or an empty directory."""

from __future__ import annotations

from pathlib import Path

import pytest

NOT_A_LOG_DIR = "is not a Kafka log dir: it holds neither meta.properties nor a partition "
NOT_A_LOG_DIR += "directory (<topic>-<partition>)"


def make(kind: str, tmp_path: Path) -> Path:
    path = tmp_path / "target"
    if kind == "empty":
        path.mkdir()
    elif kind == "unrelated":
        (path / "photos").mkdir(parents=True)  # not <topic>-<partition>
        (path / "photos" / "a.jpg").write_bytes(b"\xff\xd8")
        (path / "notes-1").write_text("a file named like a partition directory\n")
        (path / "meta.properties.bak").write_text("x=1\n")
    elif kind == "file":
        path.write_text("not a directory\n")
    return path


def listing(path: Path) -> list[tuple[str, bytes | None]]:
    if not path.exists():
        return []
    if path.is_file():
        return [(".", path.read_bytes())]
    return sorted(
        (str(p.relative_to(path)), p.read_bytes() if p.is_file() else None) for p in path.rglob("*")
    )


def expected_error(kind: str, path: Path, hint: bool, context: str = "") -> str:
    where = f"{path}{context}"
    if kind == "file":
        return f"log dir {where} is not a directory"
    reason = f"log dir {where} does not exist" if kind == "missing" else f"{where} {NOT_A_LOG_DIR}"
    if hint and kind in ("missing", "empty"):
        reason += f" (create a topic there first: kafkalog topics create --log-dir {path} NAME)"
    return reason


KINDS = ["missing", "empty", "unrelated", "file"]
READING = [
    "topics list",
    "topics describe",
    "topics describe t",
    "topics delete t",
    "consume --topic t",
    "consume --topic t --partition 0 --offset 0",
    "produce --topic t",
]


@pytest.mark.parametrize("kind", KINDS)
def test_commands_taking_a_log_dir_refuse_what_is_not_one(cli, tmp_path: Path, kind: str) -> None:
    path = make(kind, tmp_path)
    before = listing(path)
    for command in READING:
        name = command.split(" --")[0].removesuffix(" t")
        result = cli(f"{command} --log-dir {path}", stdin=b"x\n")
        assert result == (1, "", f"kafkalog {name}: {expected_error(kind, path, True)}\n"), command
        assert listing(path) == before, command
        assert path.exists() == (kind != "missing")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dry_run", [True, False])
def test_compact_refuses_what_is_not_a_log_dir(
    cli, tmp_path: Path, kind: str, dry_run: bool
) -> None:
    path = make(kind, tmp_path)
    before = listing(path)
    config = tmp_path / "compaction.toml"
    config.write_text(f'[compaction]\nlog_dirs = ["{path}"]\n')
    flag = " --dry-run" if dry_run else ""
    assert cli(f"compact --config {config}{flag}") == (
        1,
        "",
        f"kafkalog compact: {expected_error(kind, path, False, ' (compaction config log_dirs)')}\n",
    )
    assert listing(path) == before


@pytest.mark.parametrize("kind", KINDS)
def test_dump_refuses_what_holds_no_segment(cli, tmp_path: Path, kind: str) -> None:
    path = make(kind, tmp_path)
    before = listing(path)
    reason = {
        "missing": "no such file or directory",
        "file": "not a segment file (expected a .log file)",
    }.get(kind, "neither a partition directory nor a log directory")
    assert cli(f"dump {path}") == (1, "", f"kafkalog dump: {path}: {reason}\n")
    assert listing(path) == before


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_topics_create_makes_a_log_dir_of_a_missing_or_empty_path(
    cli, tmp_path: Path, kind: str
) -> None:
    path = make(kind, tmp_path)
    assert cli(f"topics create t --log-dir {path}") == (0, "Created topic t.\n", "")
    assert (path / "meta.properties").is_file() and (path / "t-0").is_dir()
    assert cli(f"topics list --log-dir {path}") == (0, "t\n", "")


@pytest.mark.parametrize("kind", ["unrelated", "file"])
def test_topics_create_refuses_a_directory_of_other_files_or_a_file(
    cli, tmp_path: Path, kind: str
) -> None:
    path = make(kind, tmp_path)
    before = listing(path)
    reason = expected_error(kind, path, False)
    if kind == "unrelated":
        reason += "; not making a log dir of a directory holding other files"
    assert cli(f"topics create t --log-dir {path}") == (
        1,
        "",
        f"kafkalog topics create: {reason}\n",
    )
    assert listing(path) == before
