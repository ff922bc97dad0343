"""`--log-store` URLs: each accepted form, and each refusal naming the bad part."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sluice.archive.store import FileLocation, S3Location, open_store, parse_store_url


@pytest.mark.parametrize(
    ("url", "location"),
    [
        ("file:///var/log/sluice", FileLocation("/var/log/sluice")),
        ("file:///var/log/sluice/", FileLocation("/var/log/sluice")),
        ("file://localhost/var/log/sluice", FileLocation("/var/log/sluice")),
        ("file:///var/log/my%20logs", FileLocation("/var/log/my logs")),
        ("s3://logs", S3Location("logs")),
        ("s3://logs/", S3Location("logs")),
        ("s3://logs/sluice/prod/", S3Location("logs", "sluice/prod")),
        (
            "s3://logs/p?endpoint=http://10.0.0.5:9000&region=eu-west-1"
            "&allow_http=true&virtual_hosted=false",
            S3Location(
                "logs",
                "p",
                endpoint="http://10.0.0.5:9000",
                region="eu-west-1",
                allow_http=True,
                virtual_hosted=False,
            ),
        ),
        (
            "s3://logs?endpoint=https://s3.example.com&virtual_hosted=TRUE&allow_http=False",
            S3Location(
                "logs", endpoint="https://s3.example.com", allow_http=False, virtual_hosted=True
            ),
        ),
    ],
)
def test_accepted_urls(url: str, location: FileLocation | S3Location) -> None:
    assert parse_store_url(url) == location


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("gs://logs/x", ["'gs'", "file:///absolute/dir", "s3://bucket"]),
        ("/var/log/sluice", ["scheme is missing", "file:///absolute/dir"]),
        ("https://s3.amazonaws.com/logs", ["'https'", "s3://bucket"]),
        ("file://var/log/sluice", ["'var' is read as a host", "file:///absolute/dir"]),
        ("file:///", ["absolute and not /"]),
        ("file:///var/../etc", ["'..'"]),
        ("file:///var/log?mkdir=true", ["no query"]),
        ("s3://", ["no bucket"]),
        ("s3:///prefix", ["no bucket"]),
        ("s3://key:secret@logs/p", ["'key:secret@logs' must be the bucket alone", "environment"]),
        ("s3://logs:9000/p", ["'logs:9000' must be the bucket alone", "?endpoint="]),
        ("s3://logs/a//b", ["'a//b'", "empty"]),
        ("s3://logs/a/../b", ["'a/../b'"]),
        ("s3://logs#frag", ["fragment"]),
        (
            "s3://logs?endpoint=http://h:1&allow_http=true&access_key_id=AKIA",
            ["unknown query parameter 'access_key_id'", "endpoint, region, allow_http"],
        ),
        ("s3://logs?Region=us-east-1", ["unknown query parameter 'Region'"]),
        ("s3://logs?region=a&region=b", ["'region' is given twice"]),
        ("s3://logs?region=", ["region is empty"]),
        ("s3://logs?allow_http=yes", ["allow_http='yes'", "true, false"]),
        ("s3://logs?virtual_hosted=1", ["virtual_hosted='1'", "true, false"]),
        ("s3://logs?endpoint=localhost:9000", ["endpoint='localhost:9000'", "http://"]),
        ("s3://logs?endpoint=ftp://h", ["endpoint='ftp://h'"]),
    ],
)
def test_refused_urls_name_the_bad_part(url: str, names: list[str]) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(repr(url))}: ") as refused:
        parse_store_url(url)
    message = str(refused.value)
    for name in names:
        assert name in message


def test_open_store_refuses_a_plain_http_endpoint_unless_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with pytest.raises(ValueError, match=r"endpoint http://h:1 is plain HTTP; add allow_http=true"):
        open_store("s3://logs?endpoint=http://h:1")
    with pytest.raises(ValueError, match="plain HTTP"):
        open_store("s3://logs?endpoint=http://h:1&allow_http=false")
    open_store("s3://logs?endpoint=http://h:1&allow_http=true")
    open_store("s3://logs?endpoint=https://h:1")
    # The environment as the AWS tools read it: the endpoint, and the permission.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://h:1")
    with pytest.raises(ValueError, match="plain HTTP"):
        open_store("s3://logs")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    open_store("s3://logs")


def test_a_file_store_makes_its_directory_and_shows_paths(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "b"
    store = open_store(f"file://{directory}")
    assert directory.is_dir()
    assert store.url_of("etl/r/t/1.log.gz") == f"{directory}/etl/r/t/1.log.gz"


def test_an_s3_store_shows_s3_urls() -> None:
    assert open_store("s3://logs/a/b/").url_of("k/1.log.gz") == "s3://logs/a/b/k/1.log.gz"
    assert open_store("s3://logs").url_of("k/1.log.gz") == "s3://logs/k/1.log.gz"
