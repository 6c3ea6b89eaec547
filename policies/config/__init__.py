"""The admin's policy file, by job: ``yaml_reading`` (bounded YAML with the line of every key),
``parameters`` (YAML values to each rule's typed ``Params``), ``namespace_selectors`` (an
override's ``namespaceSelector``), ``reader`` (the whole document with its overrides, into a
``layered_policy.Policy``), ``json_schema`` (the schema and the defaults document, generated from
the registry), ``problems`` (what is wrong, with field paths and lines). ``layered_policy`` holds
the layers and their precedence; ``rule_settings`` what applies in one namespace.

Only the error is importable from here: the package stays cheap to import, and importing it
never loads the registry (which itself imports ``rule_settings``)."""
from __future__ import annotations

from policies.config.problems import PolicyError, PolicyProblem

__all__ = ["PolicyError", "PolicyProblem"]
