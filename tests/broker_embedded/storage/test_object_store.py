"""The object store against a real S3 server (SeaweedFS, the session's ``s3`` fixture): listing,
ranged reads, and the errors that name bucket, key and byte range without a secret."""

from __future__ import annotations

import time

import pytest

from broker_embedded.storage.object_store import (
    ATTEMPTS,
    ObjectStore,
    ObjectStoreError,
    StoreLocation,
    StoreSettings,
    is_store_uri,
)
from broker_embedded.storage.remote_log_segment_metadata import (
    COPY_SEGMENT_FINISHED,
    DELETE_SEGMENT_STARTED,
    RemoteLogSegmentMetadata,
    read_manifest,
)
from tests.s3_proxy import FaultProxy
from tests.seaweedfs import ACCESS_KEY as ACCESS_KEY_TEXT
from tests.seaweedfs import SECRET_KEY, S3Server


def test_list_and_ranged_reads_of_a_real_s3_server(s3: S3Server) -> None:
    bucket = s3.new_bucket("store")
    store = StoreLocation(f"s3a://{bucket}/logs/", s3.settings).open()
    store.write("t-0/a.log", bytes(range(256)) * 4)
    store.write("t-0/b.index", b"")
    store.write("other", b"x")
    assert store.list("t-0") == {"t-0/a.log": 1024, "t-0/b.index": 0}
    assert store.list("missing/") == {}
    assert store.read_range("t-0/a.log", 250, 10) == bytes(
        [250, 251, 252, 253, 254, 255, 0, 1, 2, 3]
    )
    assert store.read_range("t-0/a.log", 1020, 100) == bytes([252, 253, 254, 255])
    assert store.size("t-0/a.log") == 1024 and store.size("t-0/none.log") is None


def test_missing_bucket_and_wrong_secret_are_named_without_the_secret(s3: S3Server) -> None:
    missing = StoreLocation("s3://no-such-bucket-kafkalog/p", s3.settings).open()
    with pytest.raises(ObjectStoreError, match="bucket 'no-such-bucket-kafkalog' key 'p/'"):
        missing.list("")
    bucket = s3.new_bucket("secret")
    StoreLocation(f"s3://{bucket}", s3.settings).open().write("k.log", b"abc")
    wrong = StoreSettings(
        s3.endpoint, "kafkalogtest", "not-the-secret", path_style_access=True, region="us-east-1"
    )
    store = StoreLocation(f"s3://{bucket}", wrong).open()
    with pytest.raises(ObjectStoreError) as failed:
        store.read_range("k.log", 1, 2, " (offset 7)")
    message = str(failed.value)
    assert f"bucket '{bucket}' key 'k.log'" in message and "bytes 1 to 3 (offset 7)" in message
    assert "not-the-secret" not in message and "not-the-secret" not in repr(store)
    assert SECRET_KEY not in repr(s3.settings) and "secret_key=<hidden>" in repr(s3.settings)
    with pytest.raises(FileNotFoundError, match=f"bucket '{bucket}' key 'gone.log'"):
        StoreLocation(f"s3://{bucket}", s3.settings).open().read_range("gone.log", 0, 1)


def test_transient_errors_are_retried_a_bounded_number_of_times(s3: S3Server) -> None:
    from tests.seaweedfs import _free_ports

    (port,) = _free_ports(1)  # nothing listens: every try is refused (transient)
    dead = StoreSettings(
        f"http://127.0.0.1:{port}", "a", "b", path_style_access=True, region="us-east-1"
    )
    store = StoreLocation("s3://bkt/p", dead).open()
    began = time.monotonic()
    with pytest.raises(
        ObjectStoreError, match=f"after {ATTEMPTS} tries at bucket 'bkt' key 'p/x.log'"
    ):
        store.read_range("x.log", 0, 8)
    assert time.monotonic() - began < 30


def test_store_uris() -> None:
    assert is_store_uri("s3://b/p") and is_store_uri("file:///tmp/x") and is_store_uri("gs://b")
    assert not is_store_uri("/data/kafka") and not is_store_uri("relative/dir")
    loc = StoreLocation("s3a://bkt/a/b/")
    assert (loc.scheme, loc.bucket, loc.prefix, loc.key("t-0/x.log")) == (
        "s3",
        "bkt",
        "a/b",
        "a/b/t-0/x.log",
    )
    with pytest.raises(ValueError, match="fs.s3a.path.style.access='yes'"):
        StoreSettings.parse({"FS.S3A.PATH.STYLE.ACCESS": "yes"})


def test_credentials_in_a_uri_are_refused_without_echoing_them() -> None:
    """A URI is shown (reprs, errors, DescribeConfigs): ``KEY:SECRET@`` there would leak."""
    for uri in ("s3://AKIAX:s3cr3t@bkt/p", "s3a://AKIAX@bkt", "gs://AKIAX:s3cr3t@bkt/p/"):
        with pytest.raises(ValueError) as e:
            StoreLocation(uri)
        shown = uri.replace("AKIAX:s3cr3t@", "").replace("AKIAX@", "")
        said = f"{shown!r} is given with credentials before its bucket or host ('user:secret@')"
        assert str(e.value).startswith(said)
        assert "s3cr3t" not in str(e.value) and "AKIAX" not in str(e.value)
        assert "fs.s3a.access.key and fs.s3a.secret.key" in str(e.value)
    with pytest.raises(ValueError, match="^'hdfs://nn:8020/p' is given with credentials before"):
        StoreLocation("hdfs://alice:pw@nn:8020/p")
    assert StoreLocation("hdfs://alice@nn:8020/p").prefix == "p"  # a user name: no secret


def test_file_uris_go_through_pyarrow_too(tmp_path) -> None:
    store = ObjectStore(StoreLocation(tmp_path.as_uri()))
    store.write("t-0/a.log", b"hello")
    assert store.list() == {"t-0/a.log": 5} and store.read_range("t-0/a.log", 1, 3) == b"ell"


def test_credentials_from_the_aws_environment(s3: S3Server, monkeypatch) -> None:
    from tests.seaweedfs import ACCESS_KEY

    bucket = s3.new_bucket("env")
    StoreLocation(f"s3://{bucket}", s3.settings).open().write("k.log", b"abc")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    no_keys = StoreSettings(s3.endpoint, path_style_access=True, region="us-east-1")
    assert StoreLocation(f"s3://{bucket}", no_keys).open().read_range("k.log", 1, 2) == b"bc"


def test_descriptors_and_options_hide_the_secret(s3: S3Server) -> None:
    from broker_embedded.storage.object_store_fetch_source import ObjectStoreSource
    from datasource.kafka_source_options import KafkaSourceOptions

    source = ObjectStoreSource(StoreLocation("s3://bkt/p", s3.settings))
    options = KafkaSourceOptions.parse({"path": "s3://bkt/p", "subscribe": "t", **s3.options()})
    assert options.store_settings == s3.settings
    for text in (repr(source), str(source), repr(options), repr(source.open())):
        assert SECRET_KEY not in text and ACCESS_KEY_TEXT not in text


def test_a_manifest_replaced_while_it_is_read_is_read_again_whole(s3: S3Server) -> None:
    """The store's reader takes an object's length from a HEAD, then GETs it: a broker
    replacing a manifest in between with a longer one (its state moved on) cuts that read
    short; the manifest is read again and parsed whole."""
    bucket = s3.new_bucket("torn")
    name = RemoteLogSegmentMetadata.name_of(0)
    copied = RemoteLogSegmentMetadata(0, 10, 100, (), 5, COPY_SEGMENT_FINISHED)
    deleting = RemoteLogSegmentMetadata(0, 10, 100, (), 5, DELETE_SEGMENT_STARTED)
    assert len(deleting.to_json()) > len(copied.to_json())
    direct = StoreLocation(f"s3://{bucket}/b", s3.settings).open()
    direct.write(name, copied.to_json())
    with FaultProxy(s3.endpoint) as proxy:
        settings = StoreSettings(
            proxy.endpoint, ACCESS_KEY_TEXT, SECRET_KEY, path_style_access=True, region="us-east-1"
        )
        proxied = StoreLocation(f"s3://{bucket}/b", settings).open()
        replace = lambda: direct.write(name, deleting.to_json())  # noqa: E731
        proxy.inject("before", matching=name, method="GET", action=replace)
        assert read_manifest(proxied, name) == deleting
        assert [line.split()[0] for line in proxy.requests if name in line] == [
            "HEAD",
            "GET",  # the replaced manifest's first len(copied) bytes: not JSON
            "HEAD",
            "GET",
        ]
