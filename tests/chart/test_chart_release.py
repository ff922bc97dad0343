"""The chart's default image, rendered: pyproject's version is its tag (ADR 0046).

tests/unit/test_release.py checks the files agree (pyproject.toml, Chart.yaml's version
and appVersion, an empty `image.tag`); this renders the chart with its defaults and
checks what a user gets: every Sluice container, and each task's heartbeat sidecar
(`--sluice-image`), on `ghcr.io/sluice-project/sluice:<pyproject's version>`, the
image `make release` publishes beside the chart; and `image.tag` still overrides it.
"""

from __future__ import annotations

import tomllib

import pytest

from tests.chart import test_chart
from tests.chart.test_chart import ROOT, Doc, render

pytestmark = pytest.mark.chart

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
PUBLISHED = "ghcr.io/sluice-project/sluice"


@pytest.fixture(scope="session", name="helm")
def helm_binary() -> str:
    """test_chart's `helm` fixture: skips without helm, fails so with SLUICE_REQUIRE_HELM=1."""
    found: str = test_chart.helm.__wrapped__()  # type: ignore[attr-defined]
    return found


def sluice_images(docs: list[Doc]) -> tuple[set[str], set[str]]:
    """(the images of every container but Postgres's, the schedulers' --sluice-image)."""
    images, sidecars = set(), set()
    for doc in docs:
        pod = (doc.get("spec") or {}).get("template", {}).get("spec") or {}
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            if container["name"] != "postgres":
                images.add(container["image"])
            args = container.get("args") or []
            if "--sluice-image" in args:
                sidecars.add(args[args.index("--sluice-image") + 1])
    return images, sidecars


def test_the_default_image_is_the_published_one_at_pyprojects_version(helm: str) -> None:
    images, sidecars = sluice_images(render(helm))
    assert images == {f"{PUBLISHED}:{VERSION}"}, images
    assert sidecars == {f"{PUBLISHED}:{VERSION}"}, sidecars


def test_image_tag_overrides_the_version(helm: str) -> None:
    images, sidecars = sluice_images(render(helm, None, "image.tag=dev"))
    assert images == sidecars == {f"{PUBLISHED}:dev"}
