"""The layers point one way: policies/ is pure and never reaches into the HTTP side."""
from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import ROOT

FORBIDDEN = ("flask", "werkzeug", "gunicorn", "webhook")


def imported_names(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_policies_module_imports_the_http_side():
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_names(path) & set(FORBIDDEN))
        for path in (ROOT / "policies").rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_loading_every_rule_and_mutation_pulls_in_no_http_module():
    probe = (
        "import sys, pkgutil, importlib, policies\n"
        "for m in pkgutil.walk_packages(policies.__path__, 'policies.'): importlib.import_module(m.name)\n"
        "from policies.registry import RULES, MUTATIONS\n"
        f"print(sorted(n for n in sys.modules if n.split('.')[0] in {FORBIDDEN!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
