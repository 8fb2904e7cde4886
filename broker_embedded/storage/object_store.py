"""A log dir's home on object storage: :class:`StoreLocation` (where, and with which settings)
and :class:`ObjectStore` (listing, ranged reads and uploads, with bounded retries).

A location is a URI that ``pyarrow.fs`` opens: ``s3://bucket/prefix`` (``s3a://`` too, as
Spark users write it), ``gs://``, ``hdfs://``, ``file://``. For S3 the settings are Hadoop
S3A's, as Spark users give them (:class:`StoreSettings`): ``fs.s3a.endpoint`` (``host:port``
or ``http(s)://host:port``), ``fs.s3a.access.key``, ``fs.s3a.secret.key``,
``fs.s3a.session.token``, ``fs.s3a.path.style.access``, ``fs.s3a.endpoint.region``,
``fs.s3a.connection.ssl.enabled``, and the timeouts ``fs.s3a.connection.establish.timeout``
(connecting; default 5 s), ``fs.s3a.connection.timeout`` (a request that receives nothing for
that long fails; default 30 s) and ``fs.s3a.connection.request.timeout`` (the whole of one try
of a read; default 60 s), in milliseconds or with a unit (``500ms``, ``2s``); unset
ones come from the AWS environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``, ``AWS_ENDPOINT_URL``, ``~/.aws``) as the AWS SDK finds them. Other schemes
take their settings from the URI and their own environment. Secrets never appear in a repr, a
log line or an error message.

Keys: a location's objects are named by paths relative to it (``events-0/000...0.log``); the
object-store layout of a log dir (which keys, in which order they are written) is in
log_dir_upload.py.

Retries: every request is tried at most :data:`ATTEMPTS` (5) times, waiting 0.1, 0.2, 0.4,
0.8 s between tries (about 1.5 s in all), when it fails with a transient error (a connection
refused or reset, a timeout, HTTP 5xx, throttling); pyarrow's own retries are off, so that the
limit is this one. A permanent error (no such bucket or key, access denied, a bad signature)
is not retried. Giving up raises :class:`ObjectStoreError` naming the bucket, the key and, for
a read, the byte range; a missing object stays a ``FileNotFoundError`` (naming them too). A
response cut short of its ``Content-Length`` is an error of the AWS SDK (retried), never short
data.

Stalling and trickling servers: pyarrow's ``request_timeout`` is curl's low-speed limit (the AWS
SDK's: a transfer slower than 1 byte/s for that many whole seconds fails), so a server that
stops sending fails a try after about ``fs.s3a.connection.timeout`` (measured, pyarrow 26, set
to 1 s: 1 s before the answer, 7.0 s after 100 bytes of a body, as curl averages the speed over
its last seconds); but one that trickles its answer never trips it, and pyarrow alone waits for
the whole body (measured: a ranged GET of 100,000 bytes sent 8 bytes every 0.1 s had 1,192
after 15 s, still running: 20 minutes for it, hours for a segment). So every
read request (listing, HEAD, GET, ranged GET) runs on a thread of its own and is waited for at
most ``fs.s3a.connection.request.timeout`` (a listing, one call of pyarrow's over pages of 1,000
keys, :data:`LISTING_PAGES` times that); past it the try is a ``TimeoutError`` (transient,
retried), the worst wait of a read :data:`ATTEMPTS` times that timeout plus the backoff. pyarrow
cannot cancel a request: one past its deadline is left running on its thread until the server
ends it, its answer dropped, holding its byte range in memory; at most :data:`MAX_HUNG` run in a
process, beyond which reads fail at once (not retried), naming bucket and key, until they end.
Writes (uploads, deletions) have no deadline: an abandoned upload could land after its retry.
A process shares one S3 file system per settings (the last :data:`KEPT_FILESYSTEMS`): pyarrow
makes no new one while any request of the process runs (its constructor waits for them: behind
a request left trickling, a new store's first read waited as long), and the file system is made
at a store's first request, within that request's deadline.

Changed objects: :meth:`ObjectStore.read_range` given the size planning listed compares it with
the object's size when it opens the object (a HEAD), and pins the object's ETag at its first
open: an object of another size, or whose ETag changed between two opens by one store (a retry,
the next read), is an :class:`ObjectChangedError` naming bucket, key and both values, not
retried. Why a HEAD before every read given a size, not one per object: pyarrow's handle
keeps the size its HEAD saw and, when a later ranged GET answers fewer bytes (the object was
cut short or replaced since), returns the requested length anyway, the tail not the object's
bytes (measured: pyarrow 26, a 10000-byte read of an object replaced by 50 bytes returned 10000
bytes). An object replaced by other bytes of the same size before a store first opened it, or
between a HEAD and its GET, is not seen here (pyarrow sends no If-Match); the batch CRCs the
reader checks catch bytes that are not the batches' own.

Thread safety: a :class:`StoreLocation` is an immutable, picklable value; an
:class:`ObjectStore` keeps the handle of the object it read last: one thread uses it (a
request's own thread touches none of its state: a handle whose read passed its deadline is
forgotten, not closed). The count of requests left running is process-wide, under a lock.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Generic, TypeVar
from urllib.parse import urlsplit

from broker_embedded.errors import KafkaLogError
from broker_embedded.storage.log_config import parse_boolean

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

T = TypeVar("T")

ATTEMPTS = 5  # tries of one request on transient errors
BACKOFF_S = 0.1  # the first wait; doubled after each try
SCHEMES = ("s3", "s3a", "gs", "gcs", "hdfs", "viewfs", "file")
# Hadoop S3A's names of the settings, as Spark users give them (fs.s3a.*)
ENDPOINT = "fs.s3a.endpoint"
ACCESS_KEY = "fs.s3a.access.key"
SECRET_KEY = "fs.s3a.secret.key"
SESSION_TOKEN = "fs.s3a.session.token"
PATH_STYLE_ACCESS = "fs.s3a.path.style.access"
REGION = "fs.s3a.endpoint.region"
SSL_ENABLED = "fs.s3a.connection.ssl.enabled"
CONNECT_TIMEOUT = "fs.s3a.connection.establish.timeout"
REQUEST_TIMEOUT = "fs.s3a.connection.timeout"
ATTEMPT_TIMEOUT = "fs.s3a.connection.request.timeout"
SETTING_NAMES = (
    ENDPOINT,
    ACCESS_KEY,
    SECRET_KEY,
    SESSION_TOKEN,
    PATH_STYLE_ACCESS,
    REGION,
    SSL_ENABLED,
    CONNECT_TIMEOUT,
    REQUEST_TIMEOUT,
    ATTEMPT_TIMEOUT,
)
CONNECT_TIMEOUT_S = 5.0  # defaults of the three timeouts
REQUEST_TIMEOUT_S = 30.0
ATTEMPT_TIMEOUT_S = 60.0
MAX_HUNG = 16  # reads past their deadline still running in a process (their memory: module doc)
KEPT_FILESYSTEMS = 16  # S3 file systems a process keeps, by settings
LISTING_PAGES = 10  # a listing (pages of 1,000 keys) gets this many times the attempt timeout
# pyarrow's messages of errors a retry cannot mend (the AWS SDK's error names)
_PERMANENT = (
    "ACCESS_DENIED",
    "NO_SUCH_BUCKET",
    "NO_SUCH_KEY",
    "INVALID_ACCESS_KEY_ID",
    "SIGNATURE_DOES_NOT_MATCH",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidBucketName",
    "AccessDenied",
    "NoSuchBucket",
    "HTTP status 403",
    "HTTP status 404",
    "HTTP status 400",
)
SECRET_NAMES = (ACCESS_KEY, SECRET_KEY, SESSION_TOKEN)  # never shown, logged or returned


class ObjectStoreError(KafkaLogError):
    """A request to the object store failed for good (after the retries a transient error
    gets); the message names the bucket, the key and what was asked."""


class ObjectChangedError(ObjectStoreError):
    """An object is not the one planning listed or a store read before: another size or ETag
    (module docstring); not retried."""


def is_store_uri(path: str) -> bool:
    """Whether ``path`` names an object-store location (``scheme://...``) rather than a local
    directory; ``file://`` counts (it goes through pyarrow too)."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def without_userinfo(uri: str) -> str:
    """``uri`` without the credentials its authority may carry (``s3://key:secret@bucket``)."""
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


@dataclass(frozen=True)
class StoreSettings:
    """The S3A settings of a location (``None``: unset, the AWS environment's); see the module
    docstring. The repr names which secrets are set, never their values."""

    endpoint: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style_access: bool | None = None
    region: str | None = None
    ssl_enabled: bool | None = None
    connect_timeout_s: float | None = None
    request_timeout_s: float | None = None
    attempt_timeout_s: float | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StoreSettings:
        """The settings among ``options`` (keys in any case: Spark lower-cases them); a bad
        boolean is a ``ValueError`` naming the option."""
        raw = {k.lower(): v for k, v in options.items()}

        def text(name: str) -> str | None:
            value = raw.get(name.lower(), "").strip()
            return value or None

        def flag(name: str) -> bool | None:
            value = text(name)
            if value is None:
                return None
            parsed = parse_boolean(value)
            if parsed is None:
                raise ValueError(f"option {name}={value!r} is invalid: give true or false")
            return parsed

        def seconds(name: str) -> float | None:
            value = text(name)
            if value is None:
                return None
            number, unit = value.lower(), 1e-3  # Hadoop's bare numbers are milliseconds
            for suffix, scale in (("ms", 1e-3), ("s", 1.0), ("m", 60.0)):
                if number.endswith(suffix):
                    number, unit = number.removesuffix(suffix).strip(), scale
                    break
            try:
                found = float(number) * unit
            except ValueError:
                found = 0.0
            if not found > 0:
                raise ValueError(
                    f"option {name}={value!r} is invalid: give a positive duration "
                    "in milliseconds, or with a unit (500ms, 2s)"
                )
            return found

        return cls(
            text(ENDPOINT),
            text(ACCESS_KEY),
            text(SECRET_KEY),
            text(SESSION_TOKEN),
            flag(PATH_STYLE_ACCESS),
            text(REGION),
            flag(SSL_ENABLED),
            seconds(CONNECT_TIMEOUT),
            seconds(REQUEST_TIMEOUT),
            seconds(ATTEMPT_TIMEOUT),
        )

    def or_else(self, other: StoreSettings) -> StoreSettings:
        """These settings, each unset one taken from ``other`` (a reader's own settings over
        what a broker says of its store)."""
        return replace(
            self,
            **{
                f.name: getattr(other, f.name)
                for f in fields(self)
                if getattr(self, f.name) is None
            },
        )

    def __repr__(self) -> str:
        given = [
            f"{n}={v!r}"
            for n, v in (
                ("endpoint", self.endpoint),
                ("region", self.region),
                ("path_style_access", self.path_style_access),
                ("ssl_enabled", self.ssl_enabled),
                ("connect_timeout_s", self.connect_timeout_s),
                ("request_timeout_s", self.request_timeout_s),
                ("attempt_timeout_s", self.attempt_timeout_s),
            )
            if v is not None
        ]
        secrets = [n for n in ("access_key", "secret_key", "session_token") if getattr(self, n)]
        given += [f"{n}=<hidden>" for n in secrets]
        return f"StoreSettings({', '.join(given)})"


@dataclass(frozen=True)
class StoreLocation:
    """A log dir on object storage: ``uri`` (``s3://bucket/prefix``, ...) and its settings.

    A URI carrying credentials before its host (``s3://KEY:SECRET@bucket/p``, any
    ``user:password@``) is refused, a ``ValueError`` showing it without them: a URI is what
    messages, reprs and DescribeConfigs show. A bare user name stays allowed where it is no
    secret (``hdfs://user@namenode``)."""

    uri: str
    settings: StoreSettings = StoreSettings()

    def __post_init__(self) -> None:
        userinfo = urlsplit(self.uri).netloc.rpartition("@")[0]
        if userinfo and (":" in userinfo or self.scheme in ("s3", "gs", "gcs")):  # never echoed
            raise ValueError(
                f"{without_userinfo(self.uri)!r} is given with credentials before its bucket or "
                "host ('user:secret@'): a URI is logged and shown, so credentials are refused "
                "there; "
                "give them as fs.s3a.access.key and fs.s3a.secret.key, or in the AWS environment"
            )
        if not is_store_uri(self.uri):
            raise ValueError(f"{self.uri!r} is not an object-store URI ({', '.join(SCHEMES)})")

    @property
    def scheme(self) -> str:
        scheme = urlsplit(self.uri).scheme.lower()
        return "s3" if scheme == "s3a" else scheme

    @property
    def bucket(self) -> str:
        """The bucket (S3, GCS), or the host of other schemes ('' for file://)."""
        return urlsplit(self.uri).netloc

    @property
    def prefix(self) -> str:
        """The key prefix of the log dir inside the bucket, without slashes at either end."""
        return urlsplit(self.uri).path.strip("/")

    def key(self, name: str) -> str:
        """The object key of ``name`` (relative to the location)."""
        return f"{self.prefix}/{name}" if self.prefix else name

    def describe(self, name: str = "") -> str:
        """``bucket B key K`` for messages (``uri`` for schemes without buckets)."""
        if self.scheme in ("s3", "gs", "gcs"):
            return f"bucket {self.bucket!r} key {self.key(name)!r}"
        return f"{self.uri.rstrip('/')}/{name}" if name else self.uri

    def open(self) -> ObjectStore:
        return ObjectStore(self)


class ObjectStore:
    """The objects of one :class:`StoreLocation`; see the module docstring."""

    def __init__(self, location: StoreLocation) -> None:
        self.location = location
        self._file_system, self._root = _filesystem(location)
        self._held: tuple[str, pa.NativeFile] | None = None  # read_range's open object
        self._etags: dict[str, bytes] = {}  # the ETag of each object read_range opened

    @property
    def _fs(self) -> pafs.FileSystem:
        """The location's file system: for S3 the process's one for these settings, made at
        the first request (on the request's thread, within its deadline: module docstring)."""
        fs = self._file_system
        if fs is None:
            fs = self._file_system = _s3_filesystem(self.location.settings)
        return fs

    def _path(self, name: str) -> str:
        return f"{self._root}/{name}" if name else self._root

    def call(self, what: str, name: str, op: Callable[[], T]) -> T:
        """``op()`` with the retries of the module docstring; ``what`` and ``name`` (the object)
        name the request in errors."""
        wait = BACKOFF_S
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return op()
            except FileNotFoundError as e:
                if name and self.location.scheme == "s3" and not self._bucket_exists():
                    raise FileNotFoundError(
                        f"{what}: no bucket {self.location.bucket!r}{self._endpoint()} (reading "
                        f"{self.location.describe(name)}): it was deleted, or never created"
                    ) from None
                raise FileNotFoundError(
                    f"{what}: no object at {self.location.describe(name)} ({e})"
                ) from None
            except OSError as e:
                permanent = isinstance(e, _TooManyHungError) or any(p in str(e) for p in _PERMANENT)
                if permanent or attempt == ATTEMPTS:
                    tries = "" if permanent else f" after {ATTEMPTS} tries"
                    raise ObjectStoreError(
                        f"{what} failed{tries} at {self.location.describe(name)}"
                        f"{self._endpoint()}: {e}"
                    ) from None
            time.sleep(wait)
            wait *= 2
        raise AssertionError("unreachable")

    def _endpoint(self) -> str:
        endpoint = self.location.settings.endpoint
        return f" (endpoint {endpoint})" if endpoint else ""

    # -- reading -----------------------------------------------------------------------------------

    def list(self, under: str = "") -> dict[str, int]:
        """Every object below ``under`` (recursive): its name relative to the location and its
        size. A missing prefix lists nothing; a missing bucket is an :class:`ObjectStoreError`."""
        import pyarrow.fs as pafs

        base = self._path(under)
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        listing = self._bounded(lambda: self._fs.get_file_info(selector), LISTING_PAGES)
        infos = self.call("listing", under, listing)
        if not infos and self.location.scheme == "s3":
            self._check_bucket()
        cut = len(self._root) + 1 if self._root else 0
        return {i.path[cut:]: i.size for i in infos if i.type == pafs.FileType.File}

    def _check_bucket(self) -> None:
        """:class:`ObjectStoreError` when the location's bucket does not exist (a listing of a
        missing bucket is empty)."""
        if not self._bucket_exists():
            bucket = self.location.bucket
            raise ObjectStoreError(
                f"no bucket {bucket!r}{self._endpoint()} (reading {self.location.describe()})"
            )

    def _bucket_exists(self) -> bool:
        import pyarrow.fs as pafs

        bucket = self.location.bucket
        info = self.call(
            "looking the bucket up", "", self._bounded(lambda: self._fs.get_file_info(bucket))
        )
        return info.type != pafs.FileType.NotFound

    def size(self, name: str) -> int | None:
        """The object's size, ``None`` when there is none."""
        import pyarrow.fs as pafs

        path = self._path(name)
        info = self.call(
            "reading the size", name, self._bounded(lambda: self._fs.get_file_info(path))
        )
        return info.size if info.type == pafs.FileType.File else None

    def read(self, name: str, context: str = "") -> bytes:
        """The whole object; ``context`` (e.g. the offset read) is added to error messages."""

        path = self._path(name)

        def op() -> bytes:
            with self._fs.open_input_stream(path) as f:
                return f.read()

        return self.call(f"reading{context}", name, self._bounded(op))

    def read_range(
        self, name: str, position: int, length: int, context: str = "", size: int | None = None
    ) -> bytes:
        """``length`` bytes of the object from ``position`` (fewer at its end): one ranged GET.
        ``context`` (e.g. the offset read) is added to error messages. ``size``: the object's
        size as planned; the object is opened (a HEAD) for each read and another size, or
        another ETag than at this store's first open of it, is an :class:`ObjectChangedError`
        (module docstring). Without ``size`` the object's handle is kept for the next read of
        the same object (the uploader's read-back of what it wrote)."""
        what = f"reading bytes {position} to {position + length}{context}"

        path = self._path(name)

        def open_and_read() -> tuple[pa.NativeFile, bytes]:
            opened = self._fs.open_input_file(path)  # a HEAD
            return opened, opened.read_at(length, position)

        def op() -> bytes:
            held = self._held
            if held is None or held[0] != name or size is not None:
                self.release()
                opened, data = self._bounded(open_and_read)()  # one thread for both requests
                self._held = (name, opened)
                self._check_unchanged(what, name, opened, size)  # else the data is dropped
                return data
            handle = held[1]
            try:
                return self._bounded(lambda: handle.read_at(length, position))()
            except TimeoutError:
                self._held = None  # still read by the request left running: not closed here
                raise
            except OSError:
                self.release()  # opened again on the next try
                raise

        return self.call(what, name, op)

    def _bounded(self, op: Callable[[], T], scale: int = 1) -> Callable[[], T]:
        """``op`` (one request of pyarrow's, touching no state of this store) bounded in time
        (module docstring): run on a thread of its own and waited for at most the attempt
        timeout; past it a ``TimeoutError`` (transient: retried), the request left to end on its
        own thread, its answer dropped. With :data:`MAX_HUNG` such requests still running in
        the process, an error at once (not retried). ``scale``: a call of that many requests
        (a listing's pages) gets that many times the timeout."""
        timeout = (self.location.settings.attempt_timeout_s or ATTEMPT_TIMEOUT_S) * scale
        name = ATTEMPT_TIMEOUT if scale == 1 else f"{scale} times {ATTEMPT_TIMEOUT}: a listing"
        return lambda: _HUNG.run(op, timeout, name)

    def _check_unchanged(self, what: str, name: str, f: pa.NativeFile, size: int | None) -> None:
        found = f.size()
        etag = f.metadata().get("ETag", b"") if self.location.scheme == "s3" else b""
        pinned = self._etags.setdefault(name, etag) if size is None or found == size else etag
        if (size is None or found == size) and etag == pinned:
            return
        self.release()
        was = f"size {size}" if size is not None and found != size else f"ETag {pinned.decode()}"
        now = f"size {found}" if size is not None and found != size else f"ETag {etag.decode()}"
        raise ObjectChangedError(
            f"{what}: the object at {self.location.describe(name)}{self._endpoint()} changed "
            f"since it was planned ({now}, planned {was}): it was replaced while being read; "
            "run the query again"
        )

    def release(self) -> None:
        """Close the handle :meth:`read_range` keeps."""
        held, self._held = self._held, None
        if held is not None:
            held[1].close()

    # -- writing -----------------------------------------------------------------------------------

    def write(self, name: str, data: bytes) -> None:
        """Put ``data`` as the object ``name`` (replacing it)."""

        def op() -> None:
            with self._output(name) as out:
                out.write(data)

        self._etags.pop(name, None)  # this store's own change
        self.call("writing", name, op)

    def upload(self, name: str, local: str, chunk: int = 8 << 20) -> None:
        """Copy the local file ``local`` to the object ``name``, ``chunk`` bytes at a time."""

        def op() -> None:
            with open(local, "rb") as f, self._output(name) as out:
                while data := f.read(chunk):
                    out.write(data)

        self._etags.pop(name, None)  # this store's own change
        self.call(f"uploading {local}", name, op)

    def _output(self, name: str) -> pa.NativeFile:
        """A stream writing the object ``name`` (on a file system, its directory made first)."""
        path = self._path(name)
        if self.location.scheme not in ("s3", "gs", "gcs"):
            self._fs.create_dir(path.rpartition("/")[0], recursive=True)
        return self._fs.open_output_stream(path)

    def delete(self, name: str) -> None:
        self._etags.pop(name, None)
        self.call("deleting", name, lambda: self._fs.delete_file(self._path(name)))

    def create_bucket(self) -> None:
        """Create the location's bucket (tests, and ``kafkalog upload --create-bucket``)."""
        self.call("creating the bucket", "", lambda: self._fs.create_dir(self.location.bucket))

    def __repr__(self) -> str:
        return f"ObjectStore({self.location.uri!r}, {self.location.settings!r})"


class _TooManyHungError(OSError):
    """:data:`MAX_HUNG` requests still run past their deadline: not retried."""


class _Attempt(Generic[T]):
    """One request run on its own thread: its outcome, and whether its caller gave up on it."""

    __slots__ = ("done", "value", "error", "abandoned")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None
        self.abandoned = False


class _HungRequests:
    """The requests of this process left running past their deadline (module docstring): each
    holds a thread and the memory of its answer until the server ends it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def run(self, op: Callable[[], T], timeout_s: float, name: str) -> T:
        with self._lock:
            if self.count >= MAX_HUNG:
                raise _TooManyHungError(
                    f"{self.count} requests to the object store still run past their "
                    f"{ATTEMPT_TIMEOUT} (a server stalling or trickling its answers): no more "
                    "are sent until they end"
                )
        attempt: _Attempt[T] = _Attempt()
        threading.Thread(
            target=self._run, args=(op, attempt), name="kafkalog-store-request", daemon=True
        ).start()
        if not attempt.done.wait(timeout_s):
            with self._lock:
                if not attempt.done.is_set():
                    attempt.abandoned = True
                    self.count += 1
            if attempt.abandoned:
                raise TimeoutError(
                    f"no whole answer within {timeout_s:g} s ({name}): the server "
                    "stalled or trickled it"
                )
        if attempt.error is not None:
            raise attempt.error
        return attempt.value  # type: ignore[return-value]

    def _run(self, op: Callable[[], T], attempt: _Attempt[T]) -> None:
        try:
            attempt.value = op()
        except BaseException as e:  # handed to the caller's thread
            attempt.error = e
        finally:
            with self._lock:
                attempt.done.set()
                if attempt.abandoned:
                    self.count -= 1
                    attempt.value = attempt.error = None  # the answer's memory, freed


_HUNG = _HungRequests()


def _filesystem(location: StoreLocation) -> tuple[pafs.FileSystem | None, str]:
    """The file system of ``location`` (``None`` for S3: :func:`_s3_filesystem` at the first
    request) and the root path of its objects in it."""
    import pyarrow.fs as pafs

    if location.scheme != "s3":
        fs, root = pafs.FileSystem.from_uri(location.uri)
        return fs, root.rstrip("/")
    return None, "/".join(p for p in (location.bucket, location.prefix) if p)


def _s3_filesystem(s: StoreSettings) -> pafs.S3FileSystem:
    """The process's S3 file system for the settings ``s`` (the last :data:`KEPT_FILESYSTEMS`
    used are kept). Shared: pyarrow cannot make a new one while any request of the process runs
    (measured, pyarrow 26: the constructor waits for every request in flight, so behind a
    request left trickling it waited as long), and its file systems are thread-safe."""
    with _FILESYSTEMS_LOCK:
        fs = _FILESYSTEMS.pop(s, None)
        if fs is not None:
            _FILESYSTEMS[s] = fs
            return fs
    fs = _new_s3_filesystem(s)  # outside the lock: it may wait (docstring)
    with _FILESYSTEMS_LOCK:
        fs = _FILESYSTEMS.setdefault(s, fs)
        _FILESYSTEMS.move_to_end(s)
        while len(_FILESYSTEMS) > KEPT_FILESYSTEMS:
            _FILESYSTEMS.popitem(last=False)
    return fs


def _new_s3_filesystem(s: StoreSettings) -> pafs.S3FileSystem:
    import pyarrow.fs as pafs

    kwargs: dict[str, object] = {
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=1),
        "allow_bucket_creation": True,
        "connect_timeout": s.connect_timeout_s or CONNECT_TIMEOUT_S,
        "request_timeout": s.request_timeout_s or REQUEST_TIMEOUT_S,
    }
    if s.endpoint:
        scheme, sep, rest = s.endpoint.partition("://")
        kwargs["endpoint_override"] = rest if sep else s.endpoint
        if sep:
            kwargs["scheme"] = scheme
    if s.ssl_enabled is not None:
        kwargs["scheme"] = "https" if s.ssl_enabled else "http"
    if s.access_key or s.secret_key:
        kwargs.update(access_key=s.access_key, secret_key=s.secret_key)
        if s.session_token:
            kwargs["session_token"] = s.session_token
    if s.region:
        kwargs["region"] = s.region
    if s.path_style_access is not None:
        kwargs["force_virtual_addressing"] = not s.path_style_access
    return pafs.S3FileSystem(**kwargs)  # type: ignore[arg-type]


_FILESYSTEMS: OrderedDict[StoreSettings, pafs.S3FileSystem] = OrderedDict()
_FILESYSTEMS_LOCK = threading.Lock()
