"""Every link in README.md and docs/ that points into the repository resolves: the file
exists, and a `#fragment` names a heading of the page it points to (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> str:
    """The page without its code blocks (a link-like text in code is not a link)."""
    kept, code = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            code = not code
            continue
        if not code:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes for the page's headings (repeats get -1, -2, ...)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    code = False
    for line in page.read_text().splitlines():
        if FENCE.match(line.strip()):
            code = not code
            continue
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if code or heading is None:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_prose(page.read_text()))]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_link_into_the_repository_resolves(page: Path):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ... : not ours
            continue
        path, _, fragment = target.partition("#")
        found = (page.parent / path).resolve() if path else page
        if not found.exists():
            broken.append(f"{target}: no such file")
        elif fragment and found.suffix == ".md" and fragment not in anchors(found):
            broken.append(f"{target}: no heading #{fragment} in {found.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_anchors_follow_githubs_rules(tmp_path: Path):
    page = tmp_path / "p.md"
    page.write_text("# Failover speed and its price\n## A, b: c\n## A, b: c\n```\n# not a heading\n```\n")
    assert anchors(page) == {"failover-speed-and-its-price", "a-b-c", "a-b-c-1"}
