"""`make release` against a real registry, and what a user then gets from it (no cluster).

CNCF distribution's registry on loopback (hack/registry.sh, behind htpasswd, as
ghcr.io is behind a login), `make release` to it, then, as a user would from a
directory with no file of this checkout (helm's own homes in it too): `helm
registry login`, `helm pull` and `helm template` of oci://.../charts/sluice,
and the registry's HTTP API for the image's tag, manifest and labels. Run by
`make release-test` (root: the image is built as hack/build-images.sh builds it,
a no-op when it is up to date); .ci/run runs it. Without the registry or helm
binaries, or not as root, it skips, saying so, unless SLUICE_REQUIRE_RELEASE=1
(set by `make release-test`), where it fails.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tarfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.hosting import free_port
from tests.registry import ROOT, Registry, Released, UserHelm, find_binary, make_release

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
PREFIX = "sluice-test/release"  # a registry path of two levels, as ghcr.io/OWNER is one
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"


def _needs(what: str) -> None:
    if os.environ.get("SLUICE_REQUIRE_RELEASE") == "1":
        pytest.fail(f"{what}, and SLUICE_REQUIRE_RELEASE=1 requires it", pytrace=False)
    pytest.skip(what)


@pytest.fixture(scope="module")
def helm() -> str:
    found = find_binary("helm")
    if found is None:
        _needs("helm not found: make helm builds it")
    assert found is not None
    return found


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    if find_binary("registry") is None:
        _needs("the registry is not built: make registry")
    if os.geteuid() != 0 or shutil.which("buildah") is None:
        _needs("make release builds the image with buildah as root (hack/build-images.sh)")
    reg = Registry(
        tmp_path_factory.mktemp("registry"),
        f"127.0.0.1:{free_port()}",
        username="releaser",
        password=secrets.token_hex(12),
    )
    reg.up()
    try:
        yield reg
    finally:
        reg.down()


@pytest.fixture(scope="module")
def released(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Released:
    dist = tmp_path_factory.mktemp("dist")
    target = f"{registry.address}/{PREFIX}"
    # Without credentials the registry refuses the push: the login below is what works.
    refused = make_release(target, dist=dist, check=False)
    assert not isinstance(refused, Released)
    assert refused.returncode != 0
    assert (
        "authentication required" in refused.stderr or "unauthorized" in refused.stderr.lower()
    ), refused.stderr[-3000:]
    logins = {
        "REGISTRY_USERNAME": registry.username or "",
        "REGISTRY_PASSWORD": registry.password or "",
    }
    done = make_release(target, dist=dist, env=logins)
    assert isinstance(done, Released)
    assert done.image == f"{target}/sluice:{VERSION}"
    assert done.chart == f"oci://{target}/charts/sluice"
    # Published once: the same version again is refused, the registry unchanged.
    again = make_release(target, dist=dist, env=logins, check=False)
    assert not isinstance(again, Released)
    assert again.returncode != 0
    assert f"{done.chart} {VERSION} is already published" in again.stderr
    return done


@pytest.fixture
def user(helm: str, registry: Registry, tmp_path: Path) -> UserHelm:
    as_user = UserHelm(helm, tmp_path / "user")
    as_user(
        "registry", "login", registry.address, "--plain-http", "--username",
        registry.username or "", "--password-stdin", stdin=registry.password,
    )  # fmt: skip
    return as_user


def test_helm_pulls_and_renders_the_released_chart_with_the_released_image(
    user: UserHelm, released: Released
) -> None:
    assert not any(user.cwd.iterdir()), "the user's directory starts empty"
    user("pull", released.chart, "--version", VERSION, "--plain-http")
    (package,) = user.cwd.iterdir()
    assert package.name == f"sluice-{VERSION}.tgz"
    with tarfile.open(package) as tar:
        member = tar.extractfile("sluice/Chart.yaml")
        assert member is not None
        meta = yaml.safe_load(member.read())
    assert (meta["name"], meta["version"], meta["appVersion"]) == ("sluice", VERSION, VERSION)

    # Straight from the registry, as `helm install oci://...` reads it.
    rendered = user("template", "sluice", released.chart, "--version", VERSION, "--plain-http")
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    images, sidecar = set(), set()
    for doc in docs:
        pod = (doc.get("spec") or {}).get("template", {}).get("spec") or {}
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            if "postgres" not in container["image"]:
                images.add(container["image"])
            args = container.get("args") or []
            if "--sluice-image" in args:
                sidecar.add(args[args.index("--sluice-image") + 1])
    # Every Sluice container, and every task's heartbeat sidecar, on the released image.
    assert images == {released.image}, images
    assert sidecar == {released.image}, sidecar


def test_the_registry_serves_the_image_and_the_chart_by_their_tags(
    registry: Registry, released: Released
) -> None:
    assert VERSION in registry.tags(f"{PREFIX}/sluice")
    assert VERSION in registry.tags(f"{PREFIX}/charts/sluice")
    digest, manifest = registry.manifest(f"{PREFIX}/sluice", VERSION)
    assert digest == released.digest, "the tag names the manifest make release pushed"
    config = registry.blob_json(f"{PREFIX}/sluice", manifest["config"]["digest"])
    labels = config["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert config["config"]["User"] == "65532:65532"
    # The chart is a Helm chart artifact, not an image.
    _, chart = registry.manifest(f"{PREFIX}/charts/sluice", VERSION)
    assert chart["config"]["mediaType"] == HELM_CONFIG
