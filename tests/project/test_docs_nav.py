"""The docs are a reference (docs/contributing-docs.md, "Reference and history"): every page is in the site's
nav, and a page outside docs/history/ states what is true now, so it names few dates, no commit and no issue
number of the project's own tracker; when, on which commit and what was tried before is history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
HISTORY = DOCS / "history"
MAX_DATES = 5  # ISO dates and commits a reference page may name
ISO_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7}\b")  # a short hash: build ids are 12
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")
LINK_TARGET = re.compile(r"\]\([^)]*\)")


def nav_pages(nav: list) -> list[str]:
    out = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            out += nav_pages(value) if isinstance(value, list) else [value]
    return out


def reference_pages() -> list[Path]:
    return [ROOT / "README.md", *(p for p in sorted(DOCS.rglob("*.md")) if HISTORY not in p.parents)]


def when(text: str) -> list[str]:
    """The dates and commits a reader sees: link targets (a history page's dated anchor) are not read."""
    text = LINK_TARGET.sub("]", text)
    return ISO_DATE.findall(text) + COMMIT.findall(text)


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert [p for p in pages if p not in nav] == [], "pages missing from the nav of mkdocs.yml"
    assert [p for p in nav if p not in pages] == [], "nav entries of mkdocs.yml with no page"
    assert len(nav) == len(set(nav))


@pytest.mark.parametrize("page", reference_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_reference_page_names_few_dates_no_commit_and_no_issue(page):
    text = page.read_text()
    found = when(text)
    assert len(found) <= MAX_DATES, (
        f"{page.relative_to(ROOT)} names {len(found)} dates or commits "
        f"({', '.join(found)}): when and on which commit goes to docs/history/"
    )
    assert not COMMIT.findall(LINK_TARGET.sub("]", text)), f"{page.relative_to(ROOT)} names a commit"
    assert not ISSUE.findall(text), f"{page.relative_to(ROOT)} names an issue a user cannot look up"


def test_the_counts_see_what_they_are_for():
    """Controls: a date, a short commit and an issue are found; a model build, a number and a link target not."""
    text = "On 2026-11-25 main at 6b517fc (issue 30) ran build a619aa027b48, 1234567 tokens ([h](h.md#x-2026-11-24))."
    assert when(text) == ["2026-11-25", "6b517fc"]
    assert ISSUE.findall(text) == ["issue 30"]
    assert nav_pages([{"A": "a.md"}, {"B": [{"C": "c/d.md"}, "e.md"]}]) == ["a.md", "c/d.md", "e.md"]
