"""The documents: every relative link reaches a file (and a heading, where it names one), no prose line runs past 400
characters, and the README runs the tests as `make test` does."""
import re

import pytest
from conftest import ROOT

PAGES = [ROOT / "README.md", ROOT / "REPRODUCING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def outside_code(text: str) -> list[str]:
    """The lines of a Markdown text outside its fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(page) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    found, count = set(), {}
    for line in outside_code(page.read_text(encoding="utf-8")):
        if m := re.match(r"#+ (.*)", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            found.add(f"{slug}-{count[slug]}" if slug in count else slug)  # a repeated heading's: -1, -2, ...
            count[slug] = count.get(slug, 0) + 1
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = re.sub(r"`[^`]*`", "", "\n".join(outside_code(page.read_text(encoding="utf-8"))))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_prose_line_over_400_characters(page):
    """Tables aside: a row is as wide as its cells."""
    long = [line[:60] for line in outside_code(page.read_text(encoding="utf-8"))
            if len(line) > 400 and not line.lstrip().startswith("|")]
    assert long == []


def test_the_readme_runs_the_tests_as_make_test_does():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^test:.*\n\t\$\(PY\) (-m pytest[^#\n]*)", makefile, re.M).group(1)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"python {recipe.strip()}" in [line.split("  #")[0].strip() for line in readme.splitlines()]
    assert "make test" in readme and "make install" in readme and "make test" in (ROOT / ".ci" / "run").read_text()
