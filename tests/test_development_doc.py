"""docs/development.md stays true: every module its layout tree names exists where the tree puts
it, and every package and subpackage of ours is in the tree."""
from __future__ import annotations

import re

from tests.conftest import ROOT

DOC = (ROOT / "docs" / "development.md").read_text()
TREE = DOC.split("## Layout", 1)[1].split("```", 2)[1]


def named_paths() -> list[str]:
    """Each name in the tree with its folders, from the indentation (two spaces a level)."""
    paths, folders = [], []  # folders: the open folder at each level
    for line in TREE.strip("\n").splitlines():
        indent = (len(line) - len(line.lstrip(" "))) // 2
        names = re.match(r"\s*([^\s,]+(?:, [^\s,]+)*)", line).group(1)
        del folders[indent:]
        for name in names.split(", "):
            paths.append("/".join([*folders, name.rstrip("/")]))
        if names.endswith("/"):
            folders.append(names.rstrip("/"))
    return paths


def test_every_module_the_tree_names_exists():
    missing = [path for path in named_paths() if not (ROOT / path).exists()]
    assert missing == []


def test_every_package_of_ours_is_in_the_tree():
    named = set(named_paths())
    packages = {str(init.parent.relative_to(ROOT)) for top in ("policies", "webhook", "certs", "testing")
                for init in (ROOT / top).rglob("__init__.py")}
    assert sorted(packages - named) == []
