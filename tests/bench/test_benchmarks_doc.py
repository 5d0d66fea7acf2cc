"""docs/benchmarks.md stays a page of current results, and the README's figures cite it.

The page grew back into a log once (1,396 lines, sections titled by machine and hour); these
checks keep it short, its headings questions rather than log entries, its commands
runnable, and every figure the README quotes tied to the section it comes from.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "benchmarks.md"
README = REPO / "README.md"
MAX_LINES = 450

# A heading that names a machine, an hour, a date or an issue is a log entry.
LOG_HEADING = re.compile(r"machine|\b\d{1,2}:\d{2}\b|\b20\d\d-\d\d|\bissue\s*#?\d+", re.I)
# A number with the units the README quotes figures in: 1.41×, 3x, 2.7 times, 20 ms, 14 s, 9%.
FIGURE = re.compile(r"\d(?:[\d,.]*\d)?\s?(?:×|x|times|ms|rows/s|%|s)(?![\w/])")
# A link into the benchmarks page, from README.md or from a page under docs/.
PAGE_LINK = re.compile(r"\]\((?:docs/)?benchmarks\.md(?:#([^)\s]*))?\)")
COMMAND = re.compile(r"^\s*(?:\.venv/bin/)?(?:python (bench/\S+\.py)|iabma (\w+))(.*)$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def code_lines(text: str) -> list[str]:
    """The lines inside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            out.append(line)
    return out


def headings(text: str) -> list[str]:
    return [line.lstrip("#").strip() for line in prose_lines(text) if line.startswith("#")]


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor, a repeated one numbered as GitHub numbers it."""
    seen: dict[str, int] = {}
    out = set()
    for h in headings(text):
        a = anchor(h)
        n = seen.get(a, 0)
        out.add(a if n == 0 else f"{a}-{n}")
        seen[a] = n + 1
    return out


def cites_a_section(line: str) -> bool:
    """Whether the line links to a section of the benchmarks page, not just the page."""
    return any(PAGE_LINK.findall(line))


def uncited_figures(readme: str) -> list[str]:
    """README lines that quote a figure without a link to a section of the benchmarks page."""
    return [ln for ln in prose_lines(readme) if FIGURE.search(ln) and not cites_a_section(ln)]


def options_known_to(command: str, script: str | None) -> str:
    """The source a command's options are declared in: a bench script and the bench
    modules it imports, or an `iabma` command's module."""
    if script is None:
        return (REPO / "training" / "commands" / f"{command}.py").read_text(encoding="utf-8")
    path = REPO / script
    text = path.read_text(encoding="utf-8")
    for module in re.findall(r"^from (bench\.[\w.]+) import", text, flags=re.M):
        found = REPO / (module.replace(".", "/") + ".py")
        if found.is_file():  # a package's own modules declare no options
            text += found.read_text(encoding="utf-8")
    return text


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_the_page_holds_current_results_in_at_most_450_lines(page: str) -> None:
    assert len(page.splitlines()) <= MAX_LINES


def test_no_heading_names_a_machine_an_hour_a_date_or_an_issue(page: str) -> None:
    assert [h for h in headings(page) if LOG_HEADING.search(h)] == []


@pytest.mark.parametrize(
    "heading",
    [
        "The batch wait, again (a fifth machine)",
        "Reading the records as Arrow (08:20-09:30)",
        "The targets measured on 2026-11-28",
        "1000-row requests at one connection (issue 32)",
    ],
)
def test_the_log_heading_rule_catches_each_kind_the_old_page_had(heading: str) -> None:
    assert LOG_HEADING.search(heading)
    assert not LOG_HEADING.search("Serving targets: 1000 rows at c1")


def test_every_readme_figure_cites_a_section_of_the_benchmarks_page() -> None:
    assert uncited_figures(README.read_text(encoding="utf-8")) == []


def test_a_figure_without_its_link_is_caught() -> None:
    bare = "serves 0.51× the bare server, 2.7 times MLServer's\n"
    page_only = "takes 14-21 s. [docs/benchmarks.md](docs/benchmarks.md) has every figure.\n"
    assert uncited_figures(bare + page_only) == [bare.strip(), page_only.strip()]
    cited = "[0.51×](docs/benchmarks.md#serving-targets) the bare server\n"
    assert uncited_figures(cited) == []


def test_every_link_into_the_page_names_an_anchor_it_has(page: str) -> None:
    known = anchors(page)
    sources = [README, *sorted((REPO / "docs").glob("*.md"))]
    missing = [
        (src.name, target)
        for src in sources
        for target in PAGE_LINK.findall(src.read_text(encoding="utf-8"))
        if target and target not in known
    ]
    assert missing == []


def test_every_command_names_a_script_and_options_that_exist(page: str) -> None:
    commands = [m for line in code_lines(page) if (m := COMMAND.match(line))]
    assert commands, "the page shows no command"
    for m in commands:
        script, command, rest = m.groups()
        if script is not None:
            assert (REPO / script).is_file(), script
        source = options_known_to(command, script)
        for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", rest.split("#", 1)[0]):
            assert f'"{option}"' in source, f"{script or command}: {option}"
