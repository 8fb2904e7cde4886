"""``kafkalog upload``: copy a log dir's closed segments, their indexes and its checkpoint files
to object storage, where Spark reads them straight from the store
(``spark.read.format("kafkalog").load("s3://bucket/prefix")``).

Usage::

    kafkalog upload --log-dir DIR --to s3://bucket/prefix [--conf fs.s3a.endpoint=URL ...]
                    [--replace] [--verify] [--create-bucket]

``--conf`` takes Hadoop S3A's settings by the names Spark users give them (``fs.s3a.endpoint``,
``fs.s3a.access.key``, ``fs.s3a.secret.key``, ``fs.s3a.session.token``,
``fs.s3a.path.style.access``, ``fs.s3a.endpoint.region``, ``fs.s3a.connection.ssl.enabled``);
unset ones come from the AWS environment (prefer it for secrets: a command line is visible to
other users of the machine). The layout, which segments go, and how a rerun resumes (skipping
what is there and verified, repairing what is not, refusing a different segment unless
``--replace``, which also deletes the stored segments the log dir no longer has) are in
broker_embedded/storage/log_dir_upload.py. Prints a line per segment uploaded, deleted or gone
from the log dir during the run (a broker's retention), and a summary; secrets are never
printed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from broker_embedded.storage.object_store import (
    SETTING_NAMES,
    StoreLocation,
    StoreSettings,
    is_store_uri,
)


class UploadUsageError(ValueError):
    """A bad ``--to`` or ``--conf`` (exit status 2)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-dir", type=Path, required=True, help="the log dir to upload")
    parser.add_argument("--to", required=True, help="s3://bucket/prefix (or gs://, hdfs://, ...)")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"an S3A setting: {', '.join(SETTING_NAMES)}",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="overwrite stored segments that differ from the log dir's and delete those it "
        "no longer has",
    )
    parser.add_argument(
        "--verify", action="store_true", help="read back every stored segment a rerun would skip"
    )
    parser.add_argument("--create-bucket", action="store_true", help="create the bucket first")


def location(to: str, conf: list[str]) -> StoreLocation:
    """The store of ``--to`` with the ``--conf`` settings (a bad one: :class:`UploadUsageError`
    naming it, never its value when it is a secret)."""
    if not is_store_uri(to):
        raise UploadUsageError(f"--to {to!r} is not an object-store URI (s3://bucket/prefix)")
    settings = {}
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep or key.strip().lower() not in SETTING_NAMES:
            raise UploadUsageError(
                f"--conf {key.strip()!r}: give KEY=VALUE with KEY one of {', '.join(SETTING_NAMES)}"
            )
        settings[key.strip().lower()] = value
    try:
        return StoreLocation(to, StoreSettings.parse(settings))
    except ValueError as e:
        raise UploadUsageError(str(e)) from None


def run(args: argparse.Namespace, out: TextIO) -> int:
    from broker_embedded.storage.log_dir_upload import upload_log_dir  # numpy, the segments

    store = location(args.to, args.conf).open()
    if args.create_bucket:
        store.create_bucket()
    report = upload_log_dir(
        args.log_dir,
        store,
        replace=args.replace,
        verify=args.verify,
        progress=lambda line: print(line, file=out, flush=True),
    )
    deleted = f", {len(report.deleted)} stale ones deleted" if report.deleted else ""
    gone = f", {len(report.gone)} gone from the log dir meanwhile" if report.gone else ""
    print(
        f"{args.to}: {len(report.uploaded)} segments uploaded, {len(report.repaired)} "
        f"repaired, {len(report.skipped)} already there and verified{deleted}{gone}; "
        f"{report.bytes_sent} bytes sent",
        file=out,
    )
    return 0
