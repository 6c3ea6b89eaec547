"""The layers point one way, and every module has a name of its own.

policies/ is pure and never reaches into the HTTP side; webhook/, policies/ and certs/ (what ships)
never import the test helpers in testing/; the benchmarks use testing/, never tests/; the rule
interface and the settings it hands out never load the registry (which imports every rule)."""
from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.conftest import ROOT

HTTP_SIDE = ("flask", "werkzeug", "gunicorn", "webhook")
SHIPPED = ("webhook", "policies", "certs")
OWN_PACKAGES = (*SHIPPED, "bench", "testing")
# At the top of policies/: the engine, the rule interface, the registry, messages, the cluster
# view and the workload view; everything else lives in a room named for its concept.
POLICIES_TOP = {"__init__.py", "engine.py", "interface.py", "registry.py", "messages.py", "cluster_view.py",
                "workload.py"}


def imported_names(path: Path, depth: int = 1) -> set[str]:
    """Every absolute module an import in ``path`` names (also inside functions), cut to ``depth`` parts."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(".".join(alias.name.split(".")[:depth]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(".".join(node.module.split(".")[:depth]))
    return names


def offenders(packages: tuple[str, ...], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {
        str(path.relative_to(ROOT)): sorted(imported_names(path) & set(forbidden))
        for package in packages for path in (ROOT / package).rglob("*.py")
    }
    return {path: names for path, names in found.items() if names}


def test_no_policies_module_imports_the_http_side():
    assert offenders(("policies",), HTTP_SIDE) == {}


def test_nothing_that_ships_imports_the_test_helpers():
    assert offenders(SHIPPED, ("testing", "tests")) == {}


def test_benchmarks_and_test_helpers_never_import_the_tests():
    assert offenders(("bench", "testing"), ("tests",)) == {}


def test_loading_every_rule_and_mutation_pulls_in_no_http_module():
    probe = (
        "import sys, pkgutil, importlib, policies\n"
        "for m in pkgutil.walk_packages(policies.__path__, 'policies.'): importlib.import_module(m.name)\n"
        "from policies.registry import RULES, MUTATIONS\n"
        f"print(sorted(n for n in sys.modules if n.split('.')[0] in {HTTP_SIDE!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_the_rule_interface_and_settings_do_not_load_the_registry():
    for module in ("interface", "config/rule_settings", "config/__init__", "config/problems", "messages"):
        assert "policies.registry" not in imported_names(ROOT / "policies" / f"{module}.py", depth=2), module
    probe = ("import sys, policies.interface, policies.config.rule_settings, policies.config\n"
             "print(sorted(n for n in sys.modules if n.startswith(('policies.registry', 'policies.rules'))))\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_no_two_modules_share_a_file_name():
    names = Counter(path.name for package in OWN_PACKAGES for path in (ROOT / package).rglob("*.py")
                    if path.name not in ("__init__.py", "__main__.py"))
    assert [name for name, count in names.items() if count > 1] == []


def test_the_top_of_policies_holds_only_the_engine_and_its_interfaces():
    assert {path.name for path in (ROOT / "policies").glob("*.py")} <= POLICIES_TOP
