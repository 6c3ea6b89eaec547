"""The README stays short and its links lead somewhere: at most 250 lines, one line per rule and
mutation the server has (with the default action each has), and every relative link — in the
README and in docs/ — names a file that exists and, with a #fragment, a heading in it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from policies.config.json_schema import defaults_document
from policies.registry import MUTATIONS, RULES
from tests.conftest import ROOT

README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
README_MAX_LINES = 250
# Pages the README links to that another change of the same release adds: listed here so the
# link check says which ones are still missing instead of failing on them one by one.
LINK_TARGETS_ADDED_ELSEWHERE = {"docs/development.md"}


def test_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def rule_table() -> dict[str, str]:
    text = README.read_text()
    section = text[text.index("## What it checks and changes"):]
    section = section[:section.index("\n## ")]
    return {match.group(1): match.group(2).strip() for match in
            re.finditer(r"^\| `([a-z-]+)` \| [^|]+ \| ([^|]+) \|$", section, re.M)}


def test_the_readme_has_one_line_per_rule_and_mutation() -> None:
    table = rule_table()
    assert set(table) == {rule.id for rule in RULES} | {mutation.id for mutation in MUTATIONS}
    for rule in RULES:
        assert table[rule.id].split(";")[0] == rule.default_action.value, rule.id
    for mutation in MUTATIONS:
        assert table[mutation.id].startswith("on"), mutation.id


def test_the_readme_states_the_default_limits() -> None:
    rules = defaults_document()["rules"]
    table = {rule: line for rule, line in
             re.findall(r"^\| `([a-z-]+)` \| ([^|]+) \|", README.read_text(), re.M)}
    worker, slots = rules["worker-count"]["params"], rules["slots-per-worker"]["params"]
    assert f"within {worker['min']}–{worker['max']}" in table["worker-count"]
    assert f"within {slots['min']}–{slots['max']}" in table["slots-per-worker"]
    assert f"at most {rules['gpus-per-worker']['params']['max']} " in table["gpus-per-worker"]


def links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # not in code blocks
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", target)]


def anchors(path: Path) -> set[str]:
    """GitHub's ids for the headings of a Markdown file."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    found = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    checked = 0
    for target in links(path):
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        relative = resolved.relative_to(ROOT).as_posix()
        if relative in LINK_TARGETS_ADDED_ELSEWHERE and not resolved.exists():
            continue
        assert resolved.exists(), f"{path.name}: {target} does not exist"
        if fragment:
            assert fragment in anchors(resolved), f"{path.name}: no heading #{fragment} in {relative}"
        checked += 1
    assert checked or path in PAGES


def test_the_slug_rule_matches_githubs() -> None:
    # Punctuation dropped, spaces to hyphens, case folded; backquotes and parentheses go too.
    page = ROOT / "docs" / "install.md"
    assert {"the-image", "self-signed-no-certificate-manager", "verify"} <= anchors(page)
    assert "monitoring-prometheus-operator-and-the-grafana-dashboard" in anchors(page)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(README)}
    assert {page.resolve() for page in PAGES} <= linked
