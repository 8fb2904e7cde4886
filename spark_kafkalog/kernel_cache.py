"""Compile every numba kernel once, into the on-disk cache Spark's Python workers load from:
:func:`ensure_compiled` and ``python -m spark_kafkalog.kernel_cache``.

Why: the kernels (header walk, record decoder and encoder, default
partitioner, cleaner, offset map, latest view) are compiled on first use and cached by numba
(``cache=True``: ``__pycache__`` beside the sources, or ``NUMBA_CACHE_DIR``). On a fresh
install every Spark Python worker that needs a kernel compiles it itself, at the same time as
the others (the decoder alone takes about 20 s of a core), and two processes writing the cache
of one function with different signatures at once can leave an index entry naming another
signature's data file (numba writes each file atomically, but reads, adds to and rewrites the
index without a lock).

What :func:`ensure_compiled` does, before Spark starts its workers (``bash dev.sh`` after its
install step, ``kafkalog demo``, the compaction job's ``main``):

1. the stamp: a file named after a SHA-256 of the kernels' sources (every module of
   ``broker_embedded/record`` and ``broker_embedded/cleaner``, the partitioner, the latest
   view's kernel), numba's and Python's versions, the machine and ``NUMBA_CACHE_DIR``. Present:
   nothing to do (one ``stat``).
2. Absent: it takes an exclusive lock (``fcntl.flock`` on ``kernels.lock`` beside the stamp),
   looks for the stamp again (another process may have compiled meanwhile), then runs
   ``python -m spark_kafkalog.kernel_cache --warm`` in a child process: the warm-ups of the codecs
   and a small real workload in a temporary log dir (keyed records with headers and tombstones,
   every codec, a committed and an aborted transaction, a cleaning, reads under both isolation
   levels, the latest view), so that every signature the product uses is compiled, each by that
   one process. Then the stamp is written (temporary file and rename).

Stale kernels: numba keys a kernel's cache entry on the file that defines it only, so a change in
a module it calls and inlines (``lz4_frame.py`` and ``snappy_block.py`` in ``decode_kernel``'s
``inflate_sections``) would leave the old compiled code in use after a ``git pull``. So each
directory numba keeps our kernels in (asked of the kernels themselves) holds a marker, the hash
of the kernels' sources it was filled from; the warm-up first deletes our kernels' cache files
from a directory whose marker is missing or names other sources, and writes the marker after.

Where the stamp lives: ``KAFKALOG_KERNEL_STAMP_DIR`` if set, else ``NUMBA_CACHE_DIR`` if set, else
the ``__pycache__`` of this package if writable, else ``~/.cache/kafkalog``.

Limits: the child gets ``WARM_TIMEOUT_S`` (600 s), the lock is waited for at most as long (then
the caller goes on without it). A warm-up that fails or runs out of time leaves no stamp and is a
:class:`KernelCacheError` with the child's last output lines, raised by the command line and
logged as a warning by the demo and the job (their workers then compile as before). Workers that
meet a signature the warm-up did not compile still compile it themselves.

Thread and process safety: the lock serialises compiling processes; the stamp appears
atomically and only after the child finished.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from broker_embedded.storage.checkpoint_file import write_atomically

log = logging.getLogger(__name__)

WARM_TIMEOUT_S = 600.0
_ROOT = Path(__file__).resolve().parents[1]
_KERNEL_SOURCES = (
    "broker_embedded/record",
    "broker_embedded/cleaner",
    "broker_embedded/client/default_partitioner.py",
    "datasource/latest_view_kernel.py",
)


class KernelCacheError(RuntimeError):
    """The kernels could not be compiled into the cache (the message says why)."""


def stamp_path() -> Path:
    """Where the stamp of the current kernels is (or would be); see the module docstring."""
    return _stamp_dir() / f"kafkalog-kernels-{_fingerprint()[:32]}.stamp"


def ensure_compiled(timeout_s: float = WARM_TIMEOUT_S, *, check: bool = False) -> bool:
    """Compile the kernels into numba's cache unless the stamp says they are; True when this call
    compiled them. A failure raises :class:`KernelCacheError` with ``check``, else is logged
    (the workers then compile as they need). See the module docstring."""
    try:
        return _ensure_compiled(timeout_s)
    except KernelCacheError as e:
        if check:
            raise
        log.warning("%s", e)
        return False


def _ensure_compiled(timeout_s: float) -> bool:
    stamp = stamp_path()
    if stamp.exists():
        return False
    with _locked(stamp.parent / "kernels.lock", timeout_s):
        if stamp.exists():
            return False
        began = time.monotonic()
        log.info("compiling kafkalog's kernels into numba's cache (once per install)")
        _run_warm_up(timeout_s)
        write_atomically(stamp, f"{time.monotonic() - began:.1f} s\n".encode())
        log.info("kernels compiled in %.1f s", time.monotonic() - began)
        return True


def _stamp_dir() -> Path:
    for name in ("KAFKALOG_KERNEL_STAMP_DIR", "NUMBA_CACHE_DIR"):
        value = os.environ.get(name)
        if value:
            return _made(Path(value))
    here = Path(__file__).resolve().parent / "__pycache__"
    with contextlib.suppress(OSError):
        here.mkdir(exist_ok=True)
    if os.access(here, os.W_OK):
        return here
    return _made(Path.home() / ".cache" / "kafkalog")


def _made(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _fingerprint() -> str:
    import numba

    h = hashlib.sha256()
    for name in (
        numba.__version__,
        sys.version,
        platform.machine(),
        platform.processor(),
        os.environ.get("NUMBA_CACHE_DIR", ""),
        _sources_hash(),
    ):
        h.update(name.encode() + b"\0")
    return h.hexdigest()


def _sources_hash() -> str:
    h = hashlib.sha256()
    for source in _sources():
        h.update(str(source.relative_to(_ROOT)).encode() + b"\0" + source.read_bytes())
    return h.hexdigest()


def _sources() -> list[Path]:
    out: list[Path] = []
    for name in _KERNEL_SOURCES:
        path = _ROOT / name
        out += sorted(path.glob("*.py")) if path.is_dir() else [path]
    return out


@contextlib.contextmanager
def _locked(path: Path, timeout_s: float) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``, waited for at most ``timeout_s`` (then none)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    log.warning(
                        "%s: still locked after %.0f s; going on without it", path, timeout_s
                    )
                    break
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)  # releases the lock


def _run_warm_up(timeout_s: float) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "spark_kafkalog.kernel_cache", "--warm"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise KernelCacheError(
            f"compiling the kernels took more than {timeout_s:.0f} s; left to the workers"
        ) from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise KernelCacheError(f"compiling the kernels failed (exit {done.returncode}):\n{tail}")


# -- the warm-up (the child process) ---------------------------------------------------------------

_MARKER = "kafkalog-kernel-sources.sha256"


def kernel_cache_dirs() -> set[Path]:
    """Where numba keeps our kernels' cache files (``NUMBA_CACHE_DIR``, the sources'
    ``__pycache__`` or a user-wide directory: numba decides, so each kernel is asked)."""
    import importlib

    from numba.core.dispatcher import Dispatcher

    dirs = set()
    for source in _sources():
        if source.name == "__init__.py":
            continue
        module = importlib.import_module(".".join(source.relative_to(_ROOT).with_suffix("").parts))
        for kernel in vars(module).values():
            if isinstance(kernel, Dispatcher) and kernel.__module__ == module.__name__:
                path = getattr(getattr(kernel, "_cache", None), "_cache_path", None)
                if path is not None:
                    dirs.add(Path(path))
    return dirs


def forget_stale_kernels(dirs: set[Path]) -> list[Path]:
    """Delete our kernels' cache files from each of ``dirs`` whose marker does not name the
    current sources (module docstring); the directories cleared."""
    current = _sources_hash()
    ours = {s.stem for s in _sources()}
    cleared = []
    for d in sorted(dirs):
        try:
            if (d / _MARKER).read_text().strip() == current:
                continue
        except OSError:
            pass  # no marker: filled before markers, or by a worker without the warm-up
        for f in list(d.glob("*.nbi")) + list(d.glob("*.nbc")):
            if f.name.split(".", 1)[0] in ours:
                f.unlink(missing_ok=True)
        cleared.append(d)
    return cleared


def _mark_current(dirs: set[Path]) -> None:
    for d in dirs:
        with contextlib.suppress(OSError):  # unmarked: the next warm-up clears it again
            write_atomically(d / _MARKER, (_sources_hash() + "\n").encode())


def warm_up() -> None:
    """Run every kernel with the argument types the product gives it (module docstring)."""
    from broker_embedded.client import default_partitioner
    from broker_embedded.record import (
        columnar_decoder,
        columnar_encoder,
        entry_scan_kernel,
    )

    entry_scan_kernel.warm_up()
    columnar_encoder.warm_up()
    columnar_decoder.warm_up()
    default_partitioner.warm_up()
    with tempfile.TemporaryDirectory(prefix="kafkalog-warm-") as d:
        _fill(Path(d))
        _clean(Path(d))
        _read(Path(d))


_TOPIC = "warm"


def _fill(log_dir: Path) -> None:
    """Keyed records with headers and tombstones in every codec, a committed and an aborted
    transaction, two segments."""
    from broker_embedded.broker import Broker
    from broker_embedded.common.producer_record import ProducerRecord

    broker = Broker(log_dir, create=True)
    try:
        broker.create_topic(_TOPIC, 1, config={"cleanup.policy": "compact", "retention.ms": -1})
        for codec in range(5):
            records = [
                ProducerRecord(
                    None if i % 7 == 0 else b"v%d" % i, b"k%d" % (i % 5), (("h", b"x"),), None
                )
                for i in range(20)
            ]
            broker.produce(_TOPIC, 0, records, compression=codec)
        for commit in (True, False):
            txn = broker.transactional_producer(f"warm-{commit}")
            txn.begin()
            txn.send(_TOPIC, 0, [ProducerRecord(b"t", b"k1")])
            txn.commit() if commit else txn.abort()
        broker.log_manager.logs[_tp()].roll()
        broker.produce(_TOPIC, 0, [ProducerRecord(b"last", b"k0")])
    finally:
        broker.close()


def _tp():  # type: ignore[no-untyped-def]
    from broker_embedded.storage.topic_partition import TopicPartition

    return TopicPartition(_TOPIC, 0)


def _clean(log_dir: Path) -> None:
    """One cleaning of the closed segment, as the compaction job runs it."""
    from broker_embedded.cleaner.cleaner import Cleaner
    from broker_embedded.cleaner.skimpy_offset_map import SkimpyOffsetMap
    from broker_embedded.storage.log_manager import open_log_for_cleaning

    lg = open_log_for_cleaning(log_dir, _tp())
    try:
        Cleaner(SkimpyOffsetMap(1 << 16, 0.9)).clean(lg, None)
    finally:
        lg.close()


def _read(log_dir: Path) -> None:
    """The partition read under both isolation levels with headers, and its latest view."""
    from broker_embedded.storage.fetch_data_info import IsolationLevel
    from broker_embedded.storage.fetch_source import LATEST_TIMESTAMP
    from broker_embedded.storage.log_dir_fetch_source import LogDirSource
    from datasource.kafka_input_partition import KafkaInputPartition
    from datasource.latest_view import LatestInputPartition, read_latest
    from datasource.offset_range_reader import read_offset_range

    source = LogDirSource(str(log_dir.resolve()))
    with source.open() as opened:
        ends = [opened.list_offset(_tp(), LATEST_TIMESTAMP, level) for level in IsolationLevel]
    for committed, end in zip((False, True), ends, strict=True):
        for headers in (False, True):
            args = (source, _TOPIC, 0, 0, end, committed, headers)
            for _ in read_offset_range(KafkaInputPartition(*args)):
                pass
            for _ in read_latest(LatestInputPartition(*args)):
                pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark_kafkalog.kernel_cache",
        description="Compile kafkalog's numba kernels into numba's on-disk cache, once.",
    )
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.warm:
        dirs = kernel_cache_dirs()
        forget_stale_kernels(dirs)
        warm_up()
        _mark_current(dirs)
        return 0
    try:
        compiled = ensure_compiled(check=True)
    except KernelCacheError as e:
        print(f"kernel cache: {e}", file=sys.stderr)
        return 1
    print("kernels compiled" if compiled else f"kernels already compiled ({stamp_path()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
