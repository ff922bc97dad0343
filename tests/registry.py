"""A real OCI registry for the release tests: hack/registry.sh over a test's own directory.

CNCF distribution's `registry serve` (hack/build-registry.sh builds it into
~/.cache/sluice/bin; `make registry`), plain HTTP, optionally behind htpasswd.
`tests/release` runs it on loopback; `tests/k8s/test_release_install.py` on the
address the cluster's node reaches, inside the cluster's network namespace. Also
here: `make release` run against it, `helm` run as a user would from a directory
with no checkout file in it, and the registry's HTTP API (tags, manifests, blobs).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.hosting import sluice_bin

ROOT = Path(__file__).resolve().parents[1]
REGISTRY_SH = ROOT / "hack" / "registry.sh"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MANIFEST_TYPES = ", ".join(
    [
        OCI_MANIFEST,
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)


# The registry is on this machine: never through a proxy the environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def find_binary(name: str) -> str | None:
    """$SLUICE_BIN/NAME if it is there (where hack/ builds helm and the registry), else PATH."""
    built = sluice_bin() / name
    if built.is_file() and os.access(built, os.X_OK):
        return str(built)
    return shutil.which(name)


@dataclass
class Registry:
    """One registry process (hack/registry.sh up) over `directory`, on `address`."""

    directory: Path
    address: str
    username: str | None = None
    password: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    def _script(self, *args: str, stdin: str | None = None) -> str:
        env = dict(os.environ, SLUICE_REGISTRY_DIR=str(self.directory), **self.env)
        env["SLUICE_REGISTRY_ADDR"] = self.address
        done = subprocess.run(
            ["bash", str(REGISTRY_SH), *args], input=stdin, env=env, capture_output=True,
            text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"hack/registry.sh {' '.join(args)}:\n{done.stderr}"
        return done.stdout.strip()

    def up(self) -> None:
        if self.username is not None:
            assert self.password is not None
            line = self._script("htpasswd", self.username, stdin=self.password + "\n")
            htpasswd = self.directory / "htpasswd"
            htpasswd.write_text(line + "\n")
            self.env["SLUICE_REGISTRY_HTPASSWD"] = str(htpasswd)
        assert self._script("up") == self.address

    def down(self) -> None:
        self._script("down")

    def log(self) -> str:
        try:
            return (self.directory / "registry.log").read_text(errors="replace")
        except OSError:
            return ""

    # -- its HTTP API (distribution-spec), as any client sees it --------------------------

    def get(self, path: str, accept: str | None = None) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(f"http://{self.address}{path}")
        if accept:
            request.add_header("Accept", accept)
        if self.username is not None:
            token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with _DIRECT.open(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def tags(self, repository: str) -> list[str]:
        status, _, body = self.get(f"/v2/{repository}/tags/list")
        assert status == 200, (status, body[:500])
        tags: list[str] = json.loads(body).get("tags") or []
        return tags

    def manifest(self, repository: str, reference: str) -> tuple[str, dict[str, Any]]:
        """(its digest, as the registry says, and the manifest) of repository:reference."""
        status, headers, body = self.get(f"/v2/{repository}/manifests/{reference}", MANIFEST_TYPES)
        assert status == 200, (status, body[:500])
        digest = {k.lower(): v for k, v in headers.items()}["docker-content-digest"]
        manifest: dict[str, Any] = json.loads(body)
        return digest, manifest

    def blob_json(self, repository: str, digest: str) -> dict[str, Any]:
        status, _, body = self.get(f"/v2/{repository}/blobs/{digest}")
        assert status == 200, (status, body[:500])
        blob: dict[str, Any] = json.loads(body)
        return blob


@dataclass(frozen=True)
class Released:
    """What `make release` said it published."""

    image: str  # HOST/PATH/sluice:VERSION
    digest: str  # the image manifest's sha256:...
    chart: str  # oci://HOST/PATH/charts/sluice
    output: str


def make_release(
    registry: str, *, dist: Path, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str] | Released:
    """`make release REGISTRY=registry PLAIN_HTTP=1` from the checkout; with `check`, the
    image and chart it reports (and an assertion on failure), else the finished process."""
    environ = dict(os.environ, DIST=str(dist), **(env or {}))
    for inherited in ("REGISTRY", "VERSION", "REGISTRY_USERNAME", "REGISTRY_PASSWORD"):
        if inherited not in (env or {}):
            environ.pop(inherited, None)
    done = subprocess.run(
        ["make", "-C", str(ROOT), "release", f"REGISTRY={registry}", "PLAIN_HTTP=1"],
        env=environ, capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    if not check:
        return done
    assert done.returncode == 0, (
        f"make release failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    )
    image = re.search(r"^  image  (\S+)@(sha256:[0-9a-f]{64})$", done.stdout, re.MULTILINE)
    chart = re.search(r"^  chart  (oci://\S+) --version", done.stdout, re.MULTILINE)
    assert image, done.stdout
    assert chart, done.stdout
    return Released(image=image[1], digest=image[2], chart=chart[1], output=done.stdout)


class UserHelm:
    """helm as a user runs it: in an empty directory, with its own config, cache and data
    homes (no login, no repository, no cached chart of this machine's), plain HTTP."""

    def __init__(self, helm: str, home: Path, kubeconfig: Path | None = None) -> None:
        self.helm = helm
        self.home = home
        self.cwd = home / "work"
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
            "KUBECONFIG": str(kubeconfig) if kubeconfig else os.devnull,
        }

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 600) -> str:
        done = subprocess.run(
            [self.helm, *args], cwd=self.cwd, env=self.env, input=stdin, capture_output=True,
            text=True, timeout=timeout, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout
