"""The README stays a first screen, and what the code and the README point at in the docs exists.

`mkdocs build --strict` (run by .ci/run) checks the links between the site's pages; these
tests check the references it cannot see: the README's links (GitHub renders it, MkDocs
does not), the pages and sections that comments in the code cite ("docs/performance.md, lever
22", "docs/decoding.md, "Repetition guard""), and that every script in bench/ is listed
where the benchmarks are documented.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
CODE_FOLDERS = ("data", "seq2seq", "export", "service", "bench", "tests")

# "docs/performance.md, lever 22", "docs/performance.md,\n    lever 19": a comment's line break may fall anywhere.
CITED_LEVER = re.compile(r"docs/performance\.md,\s+(?:#\s*)?lever\s+(\d+)")
# 'docs/decoding.md, "Repetition guard"' or with single quotes.
CITED_SECTION = re.compile(r"docs/([\w-]+\.md),\s+(?:#\s*)?[\"']([^\"']+)[\"']")
CITED_PAGE = re.compile(r"docs/([\w-]+\.md)")


def code_files() -> list[Path]:
    return [p for folder in CODE_FOLDERS for p in sorted((REPO / folder).rglob("*")) if p.suffix in (".py", ".sh")]


def headings(page: Path) -> list[str]:
    """The page's headings as text, `#`s and inline code marks dropped."""
    return [line.lstrip("#").strip().replace("`", "") for line in page.read_text().splitlines() if line.startswith("#")]


def test_readme_is_a_first_screen_that_starts_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; the rest belongs in docs/"
    first_block = README.read_text().split("```")[1]
    assert "./install.sh --serve" in first_block and "crossalign serve" in first_block
    assert "./install.sh &&" in first_block and "pytest" in first_block


def test_readme_links_point_at_files_that_exist() -> None:
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if "://" not in t]
    assert local, "the README links into docs/"
    missing = [t for t in local if not (REPO / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_every_lever_the_code_cites_has_its_section() -> None:
    sections = headings(DOCS / "performance.md")
    cited = {(int(n), p.relative_to(REPO)) for p in code_files() for n in CITED_LEVER.findall(p.read_text())}
    assert len({n for n, _ in cited}) >= 10, "the code cites the levers that shaped it"
    missing = sorted((n, str(p)) for n, p in cited if not any(re.match(rf"Levers? {n}\b", h) for h in sections))
    assert not missing, f"docs/performance.md has no section for: {missing}"
    # The history keeps one section per lever, 1 to the last one measured.
    numbered = {int(m) for h in sections for m in re.findall(r"^Lever (\d+):", h)}
    assert numbered == set(range(1, max(numbered) + 1))


def test_every_page_and_section_the_code_cites_exists() -> None:
    problems = []
    for path in code_files():
        text = path.read_text()
        for page in CITED_PAGE.findall(text):
            if not (DOCS / page).is_file():
                problems.append(f"{path.relative_to(REPO)}: docs/{page} does not exist")
        for page, title in CITED_SECTION.findall(text):
            title = " ".join(title.replace("#", " ").split())  # a comment may break it over lines
            if (DOCS / page).is_file() and not any(title in h for h in headings(DOCS / page)):
                problems.append(f'{path.relative_to(REPO)}: docs/{page} has no section "{title}"')
    assert not problems, "\n".join(problems)


def test_every_benchmark_script_is_documented() -> None:
    performance = (DOCS / "performance.md").read_text()
    undocumented = [p.name for p in sorted((REPO / "bench").glob("*.py")) if f"bench/{p.name}" not in performance]
    assert not undocumented, f"docs/performance.md (Benchmarks) does not list: {undocumented}"
