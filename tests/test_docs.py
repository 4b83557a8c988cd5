"""The docs stay legible and true to the code: BENCHMARKS.md's summary fits one screen
and every link or quoted section name into BENCHMARKS resolves; code docstrings and
comments keep the why and leave work-log numbers and dated figures to BENCHMARKS.md."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "BENCHMARKS.md"
HISTORY = REPO / "BENCHMARKS-HISTORY.md"
CODE = sorted(p for d in ("gnnsys", "samplers", "partition", "common", "tests")
              for p in (REPO / d).rglob("*.py"))

# a work-log number after "issue" or "session", also with "#" or a line break between
WORK_LOG = re.compile(r"\b(issues?|sessions?)[\s#-]*(?:\n\s*#?\s*)?#?\d", re.IGNORECASE)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# a figure tied to the one machine it was measured on
MACHINE = re.compile(r"\b(dev (machine|VM|box)|\d+-core|on the \d+ cores)\b", re.IGNORECASE)
MAX_ROWS, MAX_CELL = 30, 200


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower())
    return text.replace(" ", "-")


def headings(path: Path) -> list[str]:
    """Headings outside fenced code blocks."""
    found, fence = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            found.append(line.lstrip("#").strip())
    return found


def summary_rows() -> list[list[str]]:
    text = BENCHMARKS.read_text()
    start = text.index("\n## Summary")
    section = text[start:text.index("\n## ", start + 1)]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[2:]]


def docs_text(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file."""
    source = path.read_text()
    out = [(tok.start[0], tok.string) for tok in
           tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.append((body[0].lineno, body[0].value.value))
    return out


def test_the_summary_fits_one_screen_and_links_down():
    rows = summary_rows()
    assert 10 <= len(rows) <= MAX_ROWS, f"BENCHMARKS.md's summary has {len(rows)} rows"
    anchors = {slug(h) for h in headings(BENCHMARKS)}
    for row in rows:
        assert len(row) == 4, f"summary row with {len(row)} cells: {row[0]}"
        for cell in row:
            shown = re.sub(r"\]\([^)]*\)", "]", cell)       # as read: link targets hidden
            assert len(shown) <= MAX_CELL, f"summary cell of {len(shown)} characters: {cell[:80]}"
        links = re.findall(r"\]\(#([^)]+)\)", row[-1])
        assert links and set(links) <= anchors, f"summary row links nowhere in the file: {row[0]}"


def test_one_row_per_claim():
    claims = [row[0] for row in summary_rows()]
    assert len(claims) == len(set(claims))


@pytest.mark.parametrize("path", ["README.md", "BENCHMARKS.md", "BENCHMARKS-HISTORY.md",
                                  "docs/CODEMAP.md", "docs/CONTRIBUTING.md", "docs/DATA.md"])
def test_links_into_the_benchmarks_resolve(path):
    source = REPO / path
    for target, anchor in re.findall(r"\]\(((?:BENCHMARKS(?:-HISTORY)?\.md)?)#([^)]+)\)",
                                     source.read_text()):
        if not target and path not in ("BENCHMARKS.md", "BENCHMARKS-HISTORY.md"):
            continue                                   # an anchor of the file's own
        into = REPO / target if target else source
        assert anchor in {slug(h) for h in headings(into)}, f"{path}: no #{anchor} in {into.name}"


def test_the_two_benchmark_files_link_each_other():
    assert "](BENCHMARKS-HISTORY.md" in BENCHMARKS.read_text()
    assert "](BENCHMARKS.md" in HISTORY.read_text()


def test_section_names_quoted_from_benchmarks_exist():
    """README and the code name BENCHMARKS.md sections ("... BENCHMARKS.md, "Memory
    allocator""): each name starts a heading there."""
    names = set(headings(BENCHMARKS))
    for path in [REPO / "README.md", *(REPO / "docs").glob("*.md"), *CODE,
                 *(REPO / "scripts").rglob("*.py")]:
        text = " ".join(path.read_text().split())
        text = text.replace('" "', " ").replace("# ", "")   # comments wrapped over lines
        for quoted in re.findall(r"BENCHMARKS\.md(?:'s)?,? \(?\"([^\"]+)\"", text):
            assert any(h.startswith(quoted) for h in names), \
                f"{path.relative_to(REPO)} names a BENCHMARKS.md section that is not there: {quoted!r}"


@pytest.mark.parametrize("path", CODE, ids=lambda p: str(p.relative_to(REPO)))
def test_code_docs_carry_no_work_log_numbers_or_dates(path):
    for line, text in docs_text(path):
        for pattern, what in ((WORK_LOG, "an issue or session number"), (DATE, "a dated figure"),
                              (MACHINE, "a figure of one machine")):
            match = pattern.search(text)
            assert match is None, (f"{path.relative_to(REPO)}:{line}: {what} ({match.group(0)!r}): "
                                   "keep the why, put the figure in BENCHMARKS.md and name its section")


def test_the_algorithms_notes_are_cited_where_they_live():
    for path in CODE:
        for match in re.finditer(r"\S*ALGORITHMS\.md", path.read_text()):
            assert match.group(0).endswith("../shared/ALGORITHMS.md"), \
                f"{path.relative_to(REPO)}: cite ../shared/ALGORITHMS.md (the repository holds no copy)"
