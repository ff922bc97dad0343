"""One version from one place, and `make release`'s refusals (hack/release.sh, ADR 0046).

pyproject.toml's version is the package's, the chart's `version` and `appVersion`,
and so the default image tag (the chart's `image.tag` is empty: its appVersion).
`make release` refuses any other before it builds or contacts anything, which is
what these run: no registry, no buildah, no root needed. What it publishes, to a
real registry, is `make release-test`'s (tests/release).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sluice"
RELEASE_SH = ROOT / "hack" / "release.sh"
PYPROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# Where the tagged releases go (.github/workflows/ci.yml) and the chart's default image.
PUBLISHED = "ghcr.io/sluice-project"
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?")


def chart_meta() -> dict[str, object]:
    meta: dict[str, object] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return meta


def test_pyproject_chart_and_image_tag_agree_on_the_version() -> None:
    meta = chart_meta()
    assert meta["version"] == PYPROJECT_VERSION, "Chart.yaml's version is pyproject's"
    assert meta["appVersion"] == PYPROJECT_VERSION, "Chart.yaml's appVersion is pyproject's"
    # The default image tag is the appVersion: image.tag is empty and the helper falls back.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] == ""
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert (
        '{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag)'
        in helpers
    )


def test_the_version_is_one_string_to_pip_helm_and_an_image_tag() -> None:
    # SemVer (Helm) without build metadata ('+' is no tag character), and already in
    # PEP 440's normal form, so `sluice --version` prints the very string the chart has.
    assert SEMVER.fullmatch(PYPROJECT_VERSION), PYPROJECT_VERSION
    packaging_version = pytest.importorskip("packaging.version")
    assert str(packaging_version.Version(PYPROJECT_VERSION)) == PYPROJECT_VERSION


def test_the_chart_defaults_to_where_the_workflow_publishes() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == f"{PUBLISHED}/sluice"
    # The line hack/release.sh rewrites to the registry it publishes to.
    assert f'DEFAULT_REPOSITORY="{PUBLISHED}/sluice"' in RELEASE_SH.read_text()
    workflow = WORKFLOW.read_text()
    assert "make release REGISTRY=" in workflow
    assert "ghcr.io/" in workflow
    readme = (ROOT / "README.md").read_text()
    assert f"helm install sluice oci://{PUBLISHED}/charts/sluice --version {PYPROJECT_VERSION}" in (
        readme
    )


def _release(
    *, cwd: Path = ROOT, script: Path = RELEASE_SH, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in {"REGISTRY", "VERSION"}}
    environ.update(PYTHON=sys.executable, **env)
    return subprocess.run(
        ["bash", str(script)], cwd=cwd, env=environ, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip


def test_release_refuses_a_version_other_than_pyprojects() -> None:
    done = _release(REGISTRY="127.0.0.1:9/x", VERSION="9.9.9")
    assert done.returncode == 1
    assert (
        f"VERSION=9.9.9 differs from pyproject.toml's version ({PYPROJECT_VERSION})" in done.stderr
    )
    assert "buildah" not in done.stderr  # refused before anything was built


@pytest.mark.parametrize(
    ("registry", "says"),
    [
        ("", "REGISTRY is required"),
        ("https://ghcr.io/sluice-project", "without a scheme"),
        ("ghcr.io/Sluice-Project", "in lower case"),
    ],
)
def test_release_refuses_a_registry_it_cannot_push_to(registry: str, says: str) -> None:
    done = _release(REGISTRY=registry)
    assert done.returncode == 1
    assert says in done.stderr


def test_release_refuses_a_chart_whose_version_drifted(tmp_path: Path) -> None:
    # A copy of what the script reads, the Chart.yaml's appVersion moved on alone.
    (tmp_path / "hack").mkdir()
    for name in ("release.sh", "lib.sh"):
        shutil.copy(ROOT / "hack" / name, tmp_path / "hack" / name)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "charts" / "sluice").mkdir(parents=True)
    text = (CHART / "Chart.yaml").read_text()
    drifted = text.replace(f'appVersion: "{PYPROJECT_VERSION}"', 'appVersion: "99.0.0"')
    assert drifted != text
    (tmp_path / "charts" / "sluice" / "Chart.yaml").write_text(drifted)
    done = _release(cwd=tmp_path, script=tmp_path / "hack" / "release.sh", REGISTRY="127.0.0.1:9/x")
    assert done.returncode == 1
    assert (
        f"charts/sluice/Chart.yaml's appVersion is '99.0.0', not pyproject's {PYPROJECT_VERSION}"
        in done.stderr
    )


def _make_targets() -> set[str]:
    text = "\n".join(
        p.read_text()
        for p in (ROOT / "Makefile", ROOT / "hack" / "cluster.mk", ROOT / "bench" / "bench.mk")
    )
    return set(re.findall(r"^([a-z][a-z0-9-]*):", text, flags=re.MULTILINE))


def _make_calls(text: str) -> list[str]:
    return re.findall(r"^\s*make ([a-z][a-z0-9-]*)", text, flags=re.MULTILINE)


def test_the_workflow_calls_only_make_targets_there_are_and_every_ci_step() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    runs = [
        step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step
    ]
    called = {target for run in runs for target in _make_calls(run)}
    targets = _make_targets()
    assert called, "the workflow calls make"
    assert called <= targets, called - targets
    # Every make step of .ci/run is one of the workflow's on pull requests.
    ci_steps = set(_make_calls((ROOT / ".ci" / "run").read_text()))
    assert ci_steps <= called, ci_steps - called
    # And the release's own test, before it publishes.
    assert {"release", "release-test"} <= called
    # Its header names them all, and says it cannot run here.
    header = WORKFLOW.read_text().split("\nname:", 1)[0]
    assert "NOT RUN" in header
    for target in called:
        assert re.search(rf"\b{target}\b", header), target
