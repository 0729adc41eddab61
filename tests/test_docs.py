"""README.md is the front door and the pages of docs/ hold the rest: every
page is reachable from README.md, from the site's home page and from the
site's nav, and README.md's links lead somewhere. (The site's own links are
checked by ``mkdocs build --strict`` in scripts/test.sh.)"""

from __future__ import annotations

import re

from ._docs import ROOT, doc, section

PAGES = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))


def links(text: str) -> set[str]:
    return set(re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text))


def test_the_readme_is_a_front_door() -> None:
    assert len(doc("README.md").splitlines()) <= 250
    assert "## Changelog" not in doc("README.md")
    assert doc("CHANGELOG.md").startswith("# Changelog\n")


def test_every_readme_link_leads_to_a_file() -> None:
    for target in links(doc("README.md")):
        if "://" not in target:
            assert (ROOT / target).is_file(), target


def test_every_page_is_linked_from_the_readme_the_home_page_and_the_nav() -> None:
    readme = links(section("README.md", "Documentation"))
    home = links(doc("index.md"))
    nav = set(re.findall(r"[:-]\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    api = links(doc("api/index.md"))
    for page in PAGES:
        assert page in nav, page
        if page.startswith("api/") and page != "api/index.md":
            # The API reference's module pages hang off its own index.
            assert page.removeprefix("api/") in api, page
        elif page not in ("index.md", "changelog.md"):
            assert f"docs/{page}" in readme, page
            assert page in home, page
    assert "CHANGELOG.md" in readme and "changelog.md" in home
