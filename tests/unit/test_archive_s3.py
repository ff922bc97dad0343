"""What only an S3 store has: a real server (versitygw) going away and coming back,
credentials and settings from the environment, and where objects really land.

The store contract both stores share is in test_archive_store.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluice.archive.compress import read_archive, write_archive
from sluice.archive.keys import key_for
from sluice.archive.store import PART_SIZE, ArchiveMissing, StoreError, open_store
from tests import logtext
from tests.hosting import free_port
from tests.s3server import REGION, S3Place

KEY = key_for("etl", "scheduled__2026-01-01T00:00:00+00:00", "load", 1)


def test_objects_land_under_the_bucket_and_prefix_path_style(s3: S3Place) -> None:
    store = open_store(s3.url)
    store.put(KEY, [b"hello ", b"world"])
    # versitygw's POSIX backend keeps an object as the file <root>/<bucket>/<key>.
    assert (s3.directory / KEY).read_bytes() == b"hello world"
    assert s3.directory == s3.server.root / s3.bucket / "archives"
    assert store.url_of(KEY) == f"s3://{s3.bucket}/archives/{KEY}"


def test_credentials_come_from_the_environment(
    s3: S3Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store(s3.url).put(KEY, [b"x"])  # the fixture's environment holds the right ones
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(StoreError, match=rf"could not write s3://{s3.bucket}/.*403 Forbidden"):
        open_store(s3.url).put(KEY, [b"x"])


def test_the_url_s_settings_override_the_environment_s(
    s3: S3Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server signs for us-east-1: a request signed for another region is refused.
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing there
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    with pytest.raises(StoreError, match="AuthorizationHeaderMalformed"):
        open_store(s3.url.replace(f"&region={REGION}", "")).put(KEY, [b"x"])
    with pytest.raises(StoreError, match="could not write"):
        open_store(f"s3://{s3.bucket}?region={REGION}").put(KEY, [b"x"])
    open_store(s3.url).put(KEY, [b"x"])  # endpoint and region from the URL


def test_the_endpoint_may_come_from_the_environment(
    s3: S3Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.server.endpoint)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    store = open_store(f"s3://{s3.bucket}/from-env")
    store.put(KEY, [b"x"])
    assert (s3.server.root / s3.bucket / "from-env" / KEY).read_bytes() == b"x"


def test_delete_many_removes_the_objects_from_the_server(s3: S3Place) -> None:
    store = open_store(s3.url)
    keys = [key_for("etl", "manual__x", "load", n) for n in (1, 2)]
    for key in keys:
        store.put(key, [b"x"])
    assert all((s3.directory / key).exists() for key in keys)
    store.delete_many([*keys, key_for("etl", "manual__x", "load", 3)])  # one never written
    assert not any((s3.directory / key).exists() for key in keys)


def test_a_missing_bucket_is_a_store_error_not_a_missing_archive(s3: S3Place) -> None:
    store = open_store(s3.url.replace(s3.bucket, "no-such-bucket", 1))
    with pytest.raises(StoreError, match="NoSuchBucket") as refused:
        store.get(KEY)
    assert not isinstance(refused.value, ArchiveMissing)
    with pytest.raises(StoreError, match="could not write s3://no-such-bucket/"):
        store.put(KEY, [b"x"])
    # Not "already deleted": retention must not mark a log expired that it could not delete.
    with pytest.raises(StoreError, match="NoSuchBucket"):
        store.delete(KEY)
    with pytest.raises(StoreError, match="NoSuchBucket"):
        store.delete_many([KEY])


def test_while_the_server_is_down_every_call_fails_with_a_store_error_then_works_again(
    s3: S3Place,
) -> None:
    store = open_store(s3.url)
    write_archive(store, KEY, [b"before\n"], cap=1000)
    s3.stop()
    later = key_for("etl", "manual__x", "load", 2)
    with pytest.raises(StoreError, match=f"could not write {store.url_of(later)}"):
        write_archive(store, later, logtext.lines(2 * PART_SIZE), cap=10 * PART_SIZE)
    with pytest.raises(StoreError, match=f"could not read {store.url_of(KEY)}"):
        store.get(KEY)
    with pytest.raises(StoreError, match="could not look up"):
        store.exists(KEY)
    with pytest.raises(StoreError, match="could not delete"):
        store.delete(KEY)
    with pytest.raises(StoreError, match=f"could not delete 2 objects under s3://{s3.bucket}/"):
        store.delete_many([KEY, later])
    s3.start()
    # The same store object (its pooled connections went with the old process).
    write_archive(store, later, [b"after\n"], cap=1000)
    assert b"".join(read_archive(store, KEY)) == b"before\n"
    assert b"".join(read_archive(store, later)) == b"after\n"


def test_a_multipart_upload_that_fails_is_aborted(s3: S3Place) -> None:
    store = open_store(s3.url)

    def broken() -> Iterator[bytes]:
        yield from logtext.noise(3 * PART_SIZE)
        raise ConnectionResetError("the pod's log stream broke")

    with pytest.raises(ConnectionResetError):
        store.put(KEY, broken())
    assert not store.exists(KEY)
    # versitygw keeps an unfinished multipart upload's parts under the bucket's
    # .sgwtmp/multipart/ until it is completed or aborted.
    uploads = s3.server.root / s3.bucket / ".sgwtmp" / "multipart"
    assert uploads.is_dir()  # the upload was multipart
    assert list(uploads.iterdir()) == []
