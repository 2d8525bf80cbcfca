"""The README stays a first screen, and what the code and the README point at in the docs exists.

`mkdocs build --strict` (run by .ci/run) checks the links between the site's pages; these
tests check the references it cannot see: the README's links (GitHub renders it, MkDocs
does not), the pages and sections that comments in the code cite ("docs/performance.md, lever
22", "docs/decoding.md, "Repetition guard""), that every script in bench/ is listed
where the benchmarks are documented, and that the table of layers in docs/design.md names
every module of the packages, and only files that exist.
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
# The packages whose every module the design's table of layers names. `service` joins once
# issue #40's `service/` in role folders is merged with its row naming them (the lead adds it).
LISTED_PACKAGES = ("seq2seq", "data", "export", "service")
# A table row: | `folder/` or `file.py` | layer | role, naming files (`x.py`, `x.sh`) and folders (`x/`) |
LAYOUT_ROW = re.compile(r"^\| `([^`]+)` \|[^|]*\|(.*)\|\s*$")
NAMED = re.compile(r"`([^`\s]+(?:\.py|\.sh|/))`")


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


def layout_rows(design: str) -> dict[str, list[str]]:
    """docs/design.md's table of layers: each row's folder (or file) -> the files and folders
    its role names."""
    section = design.split("## The layers", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if match := LAYOUT_ROW.match(line):
            rows[match[1]] = NAMED.findall(match[2])
    return rows


def layout_problems(design: str, packages: tuple[str, ...] = LISTED_PACKAGES) -> list[str]:
    """What the table of layers gets wrong: a name that is no file or folder under its row's
    folder (nor from the repository's root), and a module of `packages` that its row (the
    deepest folder holding it) names neither by file nor by a folder it sits in."""
    rows = layout_rows(design)
    problems = []
    for row, names in rows.items():
        base = REPO / row if (REPO / row).is_dir() else (REPO / row).parent
        for name in names:
            under = [p.relative_to(base).as_posix() + ("/" if p.is_dir() else "") for p in base.rglob("*")]
            if not any(path == name or path.endswith("/" + name) for path in under) and not (REPO / name).exists():
                problems.append(f"`{row}` names `{name}`, which is not there")
    for package in packages:
        for path in sorted(p for p in (REPO / package).rglob("*.py") if p.name != "__init__.py"):
            module = path.relative_to(REPO).as_posix()
            owners = [row for row in rows if module == row or (row.endswith("/") and module.startswith(row))]
            if not owners:
                problems.append(f"{module}: no row of the table holds it")
                continue
            row = max(owners, key=len)
            folders = [part + "/" for part in module.removeprefix(row).split("/")[:-1]]
            named = path.name in rows[row] or any(folder in rows[row] for folder in folders)
            if row != module and not named:
                problems.append(f"{module}: the row `{row}` does not name `{path.name}`")
    return problems


def test_the_table_of_layers_names_every_module_and_only_what_exists() -> None:
    design = (DOCS / "design.md").read_text()
    assert len(layout_rows(design)) >= 12, "docs/design.md has its table of layers"
    problems = layout_problems(design)
    assert not problems, "docs/design.md, The layers:\n" + "\n".join(problems)


def test_the_layout_check_sees_a_module_left_out_and_a_name_made_up() -> None:
    design = (DOCS / "design.md").read_text()
    assert "(`hints.py`)" in design and "`records.py`" in design
    left_out = design.replace("(`dictionary.py`)", "")
    assert layout_problems(left_out) == ["data/dictionary.py: the row `data/` does not name `dictionary.py`"]
    made_up = design.replace("(`records.py`)", "(`records.py`, `ghost.py`)")
    assert layout_problems(made_up) == ["`seq2seq/decoding/` names `ghost.py`, which is not there"]
    # A module in a folder the row names as a whole (`batch/`) counts as named.
    assert not any("seq2seq/cli/batch/" in problem for problem in layout_problems(design))
