"""Where archives live: an S3-compatible bucket or a local directory, opened from a URL.

One small interface over obstore (ADR 0036), so the worker and `sluice logs`
never see which store it is, and one error type each for "the store failed"
(`StoreError`, which the archiving worker catches and retries later) and "no
such archive" (`ArchiveMissing`). Credentials are never in the URL: an S3
store takes them from the environment as the AWS tools do (`AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
...), which a Kubernetes Secret can supply; the URL's query overrides the
environment. Requests are retried briefly (a few seconds); a store down for
longer is the caller's to retry, not a reason to block a worker for minutes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

import obstore
from obstore.exceptions import BaseError
from obstore.store import LocalStore, S3Store

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

S3_PARAMETERS = ("endpoint", "region", "allow_http", "virtual_hosted")
_BOOLEANS = {"true": True, "false": False}

# A put buffers up to one part (S3's minimum part size) and, for a bigger
# object, has at most _PUT_CONCURRENCY parts in flight: it holds at most about
# 15 MiB (outside Python) whatever the object's size.
PART_SIZE = 5 * 1024 * 1024
_PUT_CONCURRENCY = 2
_GET_CHUNK = 256 * 1024

_RETRY: RetryConfig = {
    "max_retries": 3,
    "retry_timeout": timedelta(seconds=10),
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2)},
}


class StoreError(Exception):
    """The store failed or refused: unreachable, wrong credentials, no such bucket, ..."""


class ArchiveMissing(StoreError):
    """No object under the key (it was never written, or was deleted)."""


class LogStore:
    """Archives by key under one root (a bucket and prefix, or a directory)."""

    def __init__(self, store: S3Store | LocalStore, root: str) -> None:
        self._store = store
        self._root = root.rstrip("/")

    def put(self, key: str, chunks: Iterable[bytes]) -> None:
        """Store the chunks under `key` as they come, replacing any object there.

        An object is seen whole or not at all. Up to one part (5 MiB) is
        buffered and sent in one request; a bigger object goes as a multipart
        upload, aborted if anything fails, so no stray parts are left behind
        (unless the abort itself cannot reach the store). An error raised by
        `chunks` propagates as it is, and nothing is stored.
        """
        path = self._checked(key)
        try:
            with obstore.open_writer(
                self._store, path, buffer_size=PART_SIZE, max_concurrency=_PUT_CONCURRENCY
            ) as writer:
                for chunk in _source(chunks):
                    if chunk:
                        writer.write(chunk)
        except _SourceFailed as failed:
            raise failed.error from None
        except (BaseError, OSError) as exc:
            raise StoreError(f"could not write {self.url_of(key)}: {_message(exc)}") from exc

    def get(self, key: str) -> Iterator[bytes]:
        """The object's bytes as a stream; ArchiveMissing at once if there is none."""
        path = self._checked(key)
        try:
            result = obstore.get(self._store, path)
        except FileNotFoundError as exc:
            if _no_bucket(exc):
                raise StoreError(f"could not read {self.url_of(key)}: {_message(exc)}") from exc
            raise ArchiveMissing(f"no archive at {self.url_of(key)}") from exc
        except (BaseError, OSError) as exc:
            raise StoreError(f"could not read {self.url_of(key)}: {_message(exc)}") from exc
        return self._stream(key, iter(result.stream(min_chunk_size=_GET_CHUNK)))

    def exists(self, key: str) -> bool:
        path = self._checked(key)
        try:
            obstore.head(self._store, path)
        except FileNotFoundError as exc:
            if _no_bucket(exc):
                raise StoreError(f"could not look up {self.url_of(key)}: {_message(exc)}") from exc
            return False
        except (BaseError, OSError) as exc:
            raise StoreError(f"could not look up {self.url_of(key)}: {_message(exc)}") from exc
        return True

    def delete(self, key: str) -> None:
        """Delete the object; a key with no object is not an error (deleting twice is fine)."""
        path = self._checked(key)
        try:
            obstore.delete(self._store, path)
        except FileNotFoundError as exc:
            if _no_bucket(exc):
                raise StoreError(f"could not delete {self.url_of(key)}: {_message(exc)}") from exc
        except (BaseError, OSError) as exc:
            raise StoreError(f"could not delete {self.url_of(key)}: {_message(exc)}") from exc

    def delete_many(self, keys: Sequence[str]) -> None:
        """Delete the objects, in as few requests as the store allows (S3: one per 1,000
        keys); a key with no object is not an error. On StoreError, some may be deleted."""
        paths = [self._checked(key) for key in keys]
        if not paths:
            return
        try:
            obstore.delete(self._store, paths)
        except FileNotFoundError as exc:
            if _no_bucket(exc):
                raise StoreError(
                    f"could not delete {len(paths)} objects under {self._root}: {_message(exc)}"
                ) from exc
            # A directory's bulk delete fails on a missing file (S3's does not): one by one then.
            for key in keys:
                self.delete(key)
        except (BaseError, OSError) as exc:
            raise StoreError(
                f"could not delete {len(paths)} objects under {self._root}: {_message(exc)}"
            ) from exc

    def url_of(self, key: str) -> str:
        """Where the key's object is, for people: `s3://bucket/prefix/key` or a file path."""
        return f"{self._root}/{key}"

    def _stream(self, key: str, chunks: Iterator[bytes]) -> Iterator[bytes]:
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except (BaseError, OSError) as exc:
                raise StoreError(f"could not read {self.url_of(key)}: {_message(exc)}") from exc
            yield chunk

    @staticmethod
    def _checked(key: str) -> str:
        parts = key.split("/")
        if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(
                f"{key!r} is not a relative key (no leading '/', empty, '.' or '..' parts)"
            )
        return key


class _SourceFailed(Exception):
    """Carries an error of the chunks' source through the writer, told apart from the store's."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _source(chunks: Iterable[bytes]) -> Iterator[bytes]:
    try:
        yield from chunks
    except Exception as exc:
        raise _SourceFailed(exc) from exc


@dataclass(frozen=True)
class FileLocation:
    """A local directory (absolute)."""

    directory: str


@dataclass(frozen=True)
class S3Location:
    """A bucket and prefix; None leaves a setting to the environment (then obstore's default)."""

    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None
    allow_http: bool | None = None
    virtual_hosted: bool | None = None


def open_store(url: str) -> LogStore:
    """The store a URL names (see `parse_store_url`); ValueError if the URL is not one."""
    match parse_store_url(url):
        case FileLocation(directory):
            try:
                local = LocalStore(directory, mkdir=True)
            except (BaseError, OSError) as exc:
                raise StoreError(f"could not open {directory}: {_message(exc)}") from exc
            return LogStore(local, directory)
        case S3Location() as location:
            return _open_s3(url, location)


def parse_store_url(url: str) -> FileLocation | S3Location:
    """Where a `--log-store` URL points; ValueError naming the bad part and what is accepted.

    - `file:///abs/dir`: a local directory, created if missing.
    - `s3://bucket[/prefix][?endpoint=URL&region=R&allow_http=true&virtual_hosted=false]`:
      an S3 bucket or an S3-compatible server's (path-style requests unless
      `virtual_hosted=true`). Credentials are never in the URL.
    """
    parts = urlsplit(url)
    match parts.scheme:
        case "file":
            return _parse_file(url)
        case "s3":
            return _parse_s3(url)
        case _:
            shown = repr(parts.scheme) if parts.scheme else "missing"
            raise ValueError(
                f"{url!r}: the scheme is {shown}; accepted: "
                "file:///absolute/dir, s3://bucket/prefix?endpoint=...&region=..."
            )


def _parse_file(url: str) -> FileLocation:
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r}: a file:// URL takes no query or fragment")
    if parts.netloc not in ("", "localhost"):
        raise ValueError(
            f"{url!r}: {parts.netloc!r} is read as a host; "
            "a directory must be absolute: file:///absolute/dir"
        )
    path = PurePosixPath(unquote(parts.path))
    if not path.is_absolute() or str(path) == "/":
        raise ValueError(f"{url!r}: the directory must be absolute and not /: file:///absolute/dir")
    if ".." in path.parts:
        raise ValueError(f"{url!r}: the directory must not contain '..'")
    return FileLocation(str(path))


def _parse_s3(url: str) -> S3Location:
    parts = urlsplit(url)
    if parts.fragment:
        raise ValueError(f"{url!r}: an s3:// URL takes no fragment")
    if "@" in parts.netloc or ":" in parts.netloc:
        raise ValueError(
            f"{url!r}: {parts.netloc!r} must be the bucket alone "
            "(credentials come from the environment, the server from ?endpoint=)"
        )
    if not parts.netloc:
        raise ValueError(f"{url!r}: no bucket: s3://bucket/prefix")
    prefix = unquote(parts.path).strip("/")
    if prefix and any(p in ("", ".", "..") for p in prefix.split("/")):
        raise ValueError(f"{url!r}: the prefix {prefix!r} has an empty, '.' or '..' part")
    settings: dict[str, str | bool] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in S3_PARAMETERS:
            raise ValueError(
                f"{url!r}: unknown query parameter {name!r}; accepted: {', '.join(S3_PARAMETERS)}"
            )
        if name in settings:
            raise ValueError(f"{url!r}: {name!r} is given twice")
        settings[name] = _setting(url, name, value)
    return S3Location(
        bucket=parts.netloc,
        prefix=prefix,
        endpoint=_str_or_none(settings.get("endpoint")),
        region=_str_or_none(settings.get("region")),
        allow_http=_bool_or_none(settings.get("allow_http")),
        virtual_hosted=_bool_or_none(settings.get("virtual_hosted")),
    )


def _setting(url: str, name: str, value: str) -> str | bool:
    match name:
        case "endpoint":
            endpoint = urlsplit(value)
            if endpoint.scheme not in ("http", "https") or not endpoint.netloc:
                raise ValueError(f"{url!r}: endpoint={value!r} is not an http:// or https:// URL")
            return value
        case "region":
            if not value:
                raise ValueError(f"{url!r}: region is empty")
            return value
        case _:  # allow_http, virtual_hosted
            try:
                return _BOOLEANS[value.lower()]
            except KeyError:
                raise ValueError(f"{url!r}: {name}={value!r}; accepted: true, false") from None


def _str_or_none(value: str | bool | None) -> str | None:
    return value if isinstance(value, str) else None


def _bool_or_none(value: str | bool | None) -> bool | None:
    return value if isinstance(value, bool) else None


def _open_s3(url: str, location: S3Location) -> LogStore:
    config: S3Config = {}
    # Only what the URL says: client options given replace all those obstore
    # reads from the environment (AWS_ALLOW_HTTP, AWS_PROXY_URL, ...).
    client: ClientConfig | None = None
    if location.endpoint is not None:
        config["endpoint"] = location.endpoint
    if location.region is not None:
        config["region"] = location.region
    if location.virtual_hosted is not None:
        config["virtual_hosted_style_request"] = location.virtual_hosted
    if location.allow_http is not None:
        client = {"allow_http": location.allow_http}
    # obstore would refuse a plain-HTTP endpoint only at the first request; say it now.
    endpoint = (
        location.endpoint
        or os.environ.get("AWS_ENDPOINT_URL")
        or os.environ.get("AWS_ENDPOINT", "")
    )
    allowed = location.allow_http
    if allowed is None:
        allowed = os.environ.get("AWS_ALLOW_HTTP", "").lower() == "true"
    if endpoint.startswith("http://") and not allowed:
        raise ValueError(
            f"{url!r}: the endpoint {endpoint} is plain HTTP; add allow_http=true to accept it"
        )
    try:
        store = S3Store(
            location.bucket,
            prefix=location.prefix or None,
            config=config,
            client_options=client,
            retry_config=_RETRY,
        )
    except (BaseError, OSError, ValueError) as exc:
        raise ValueError(f"{url!r}: {_message(exc)}") from exc
    root = f"s3://{location.bucket}"
    return LogStore(store, f"{root}/{location.prefix}" if location.prefix else root)


def _no_bucket(exc: BaseException) -> bool:
    # S3 answers 404 for a missing bucket as for a missing object; only the error code differs.
    return "NoSuchBucket" in str(exc)


def _message(exc: BaseException) -> str:
    # obstore's messages end with a multi-line Rust debug dump; its first paragraph says it all.
    return str(exc).split("\n\nDebug source:", 1)[0].strip() or type(exc).__name__
