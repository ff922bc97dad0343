"""Every relative link and image in README.md and docs/ points at a file that exists.

A link to a markdown file's `#anchor` must name one of its headings, slugged as
GitHub slugs them (lower case, punctuation dropped, spaces to hyphens, `-1`,
`-2`... for repeats). Links inside fenced code blocks and code spans are not
links; absolute URLs are not checked (no network in the tests).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, code spans blanked."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(_CODE_SPAN.sub("", line))
    return lines


def links(text: str) -> list[str]:
    """Every link and image target of a markdown text, in order."""
    found = []
    for line in _prose_lines(text):
        found.extend(match.group(1) for match in _LINK.finditer(line))
        reference = _REFERENCE.match(line)
        if reference:
            found.append(reference.group(1))
    return found


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a markdown text, repeats numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading is None:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """The page's relative links that point at nothing, each with why (paths from `root`)."""
    problems = []
    text = page.read_text()
    for target in links(text):
        if _SCHEME.match(target) or target.startswith("//"):
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            problems.append(f"{target}: no such file ({resolved.relative_to(root)})")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            problems.append(f"{target}: no heading #{anchor} in {resolved.relative_to(root)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken(page) == []


def test_the_readme_links_into_docs() -> None:
    targets = links((ROOT / "README.md").read_text())
    for page in ("semantics.md", "high-availability.md", "usage.md", "cluster.md", "install.md"):
        assert f"docs/{page}" in {target.partition("#")[0] for target in targets}, page


def test_the_checker_finds_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text(
        "# A title\n\n## `make demo-cluster`\n\n## Twice\n\n## Twice\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-title) [ok](there.md#make-demo-cluster)\n"
        "[ok](there.md#twice-1) [ok](https://example.com/x) [ok](#here) ![img](missing.png)\n"
        "[bad](there.md#nowhere) `[not a link](gone.md)`\n"
        "```\n[not a link](gone.md)\n```\n"
        "## Here\n"
    )
    assert broken(page, root=tmp_path) == [
        "missing.png: no such file (missing.png)",
        "there.md#nowhere: no heading #nowhere in there.md",
    ]
