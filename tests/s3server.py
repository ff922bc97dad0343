"""A real S3-compatible server for the archive tests: versitygw over a temporary directory.

versitygw (github.com/versity/versitygw) is an S3 gateway; its POSIX backend
keeps each bucket as a directory and each object as a file, so a bucket is
made by making its directory. `make s3-server` builds it once from source
into ~/.cache/sluice/bin (hack/build-versitygw.sh). It starts once per
session on 127.0.0.1 with a free port; each test gets a fresh bucket, a
prefix in it, and the root credentials in the environment (as a Kubernetes
Secret would supply them). `stop()` and `start()` take the server away and
bring it back on the same port and directory, for "storage down" tests.

Without the binary the tests that need it skip, saying how to build it,
unless SLUICE_REQUIRE_S3=1, where they fail.
"""

from __future__ import annotations

import http.client
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hosting import free_port, sluice_bin

ACCESS_KEY = "sluice-test-access"
SECRET_KEY = "sluice-test-secret-key"
REGION = "us-east-1"
MISSING = "versitygw not built: make s3-server"
# AWS settings a developer's environment may carry that would point the tests elsewhere.
_AWS_ISOLATION = (
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT",
    "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
    "AWS_PROFILE",
    "AWS_DEFAULT_REGION",
    "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
)
_buckets = itertools.count()


def find_versitygw() -> Path | None:
    """$VERSITYGW, else hack/lib.sh's $SLUICE_BIN/versitygw (~/.cache/sluice/bin)."""
    if os.environ.get("VERSITYGW"):
        binary = Path(os.environ["VERSITYGW"])
    else:
        binary = sluice_bin() / "versitygw"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


class S3Server:
    """One versitygw process serving `root` on `host`:`port` (loopback unless told: the k8s
    tests serve the cluster's pods on the node address); stop and start at will."""

    def __init__(self, binary: Path, root: Path, port: int, host: str = "127.0.0.1") -> None:
        self.binary = binary
        self.root = root
        self.port = port
        self.host = host
        self.log = root.parent / "versitygw.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def command(self) -> list[str]:
        return [
            str(self.binary),
            "--port",
            f"{self.host}:{self.port}",
            "--region",
            REGION,
            "--quiet",
            "posix",
            str(self.root),
        ]

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs (the benchmark reads its CPU)."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = 30.0) -> None:
        """Start the server (a no-op if it runs) and return once it answers HTTP."""
        if self.running:
            return
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/"),
            # From the environment, not flags: the secret stays out of `ps`.
            "ROOT_ACCESS_KEY": ACCESS_KEY,
            "ROOT_SECRET_KEY": SECRET_KEY,
        }
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                self.command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"versitygw exited with {self._process.returncode}{self._tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"versitygw did not answer within {timeout:.0f} s{self._tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s); its buckets stay on disk."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def create_bucket(self) -> str:
        """A new, empty bucket (the POSIX backend's buckets are the root's directories)."""
        name = f"sluice-test-{next(_buckets):04d}"
        (self.root / name).mkdir()
        return name

    def url(self, bucket: str, prefix: str = "") -> str:
        """The `--log-store` URL of a bucket (and prefix) on this server."""
        path = f"/{prefix}" if prefix else ""
        return f"s3://{bucket}{path}?endpoint={self.endpoint}&region={REGION}&allow_http=true"

    def _answers(self) -> bool:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=1)
        try:
            connection.request("GET", "/")
            connection.getresponse().read()  # 403 without credentials: it is up
        except OSError:
            return False
        finally:
            connection.close()
        return True

    def _tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-20:]
        except OSError:
            return ""
        return ": " + "\n".join(lines) if lines else " (no output)"


@dataclass(frozen=True)
class S3Place:
    """A test's own bucket and prefix on the session's server, and its store URL."""

    server: S3Server
    bucket: str
    prefix: str
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY

    @property
    def url(self) -> str:
        return self.server.url(self.bucket, self.prefix)

    @property
    def directory(self) -> Path:
        """Where the server keeps this place's objects (to check what it really stored)."""
        return self.server.root / self.bucket / self.prefix

    def stop(self) -> None:
        self.server.stop()

    def start(self) -> None:
        self.server.start()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    binary = find_versitygw()
    if binary is None:
        if os.environ.get("SLUICE_REQUIRE_S3") == "1":
            pytest.fail(f"{MISSING} (SLUICE_REQUIRE_S3=1 requires it)")
        pytest.skip(MISSING)
    # Not under pytest's tmp_path, which pytest prunes while another session may use it.
    base = Path(tempfile.mkdtemp(prefix="sluice-test-s3-"))
    (base / "root").mkdir()
    server = S3Server(binary, base / "root", free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Place:
    """A fresh bucket and prefix, the server running, and its credentials in the environment."""
    s3_server.start()  # a previous test may have left it stopped
    for name in _AWS_ISOLATION:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", REGION)
    return S3Place(s3_server, s3_server.create_bucket(), "archives")
