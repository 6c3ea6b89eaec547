"""Every read of the MPIJob in an exported CEL expression, checked against the CRD schema the
API server type-checks and evaluates the policy with: the closest check we have of a policy
on a live API server.

An expression is parsed (cel-python's parser) into a small syntax tree; each selection and map
index on ``object`` / ``oldObject`` is followed through the CRD's ``openAPIV3Schema``, with
comprehension variables bound to the items (lists) or keys (maps) they range over. Found:

- a field the schema does not have (the type-checker's "undefined field");
- a field selected on a map node (``additionalProperties``) or a map key indexed on an object
  node (they are typed differently);
- an optional field (not in its object's ``required``) read where nothing proves it set, and
  a map key read where nothing proves it is in the map: at runtime "no such key", an
  evaluation error, and the policy's failurePolicy instead of its answer. What proves it:
  ``has(x.f)``, ``'k' in m`` (or ``k`` ranging over ``m``), on the left of ``&&``, as the
  condition of ``?:``, negated on the left of ``||``; ``oldObject`` read only where
  ``request.operation == 'UPDATE'`` holds; a validation's ``messageExpression`` is read only
  where its ``expression`` was false;
- an int-or-string value (``x-kubernetes-int-or-string``: quantities) used other than through
  ``string()`` (then ``quantity()`` / ``isQuantity()``) or ``type()``, or where
  ``type(x) == string`` holds: the same field may hold an int or a string;
- a schema scalar compared with a literal of another type (``no matching overload``).

Not modelled: the type-checker's full type system (functions' overloads, list and map element
types of values built in CEL), the ``?`` optional syntax (cel-python does not parse it; the
export does not use it), and a key proven present only through a variable's value (see
``trusted`` in the test).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from testing.crd import OBJECT_META  # what CEL reads of metadata: the CRD says only "object"
from policies.vap.shared_parts import PREFIX as SHARED
from webhook.cel.syntax import Node, parse

ROOTS = ("object", "oldObject")
MACROS = {"all", "exists", "exists_one", "map", "filter"}
# The API server sets these on every object it admits.
ALWAYS_SET = {"apiVersion", "kind", "metadata"}
UPDATE = "update"


def canonical(node: Node) -> str | None:
    """``object.spec.a['k'][v]``: the text of a path of selections and indexes, None for
    anything else."""
    if node.kind == "ident":
        return str(node.value)
    if node.kind == "select":
        base = canonical(node.children[0])
        return None if base is None else f"{base}.{node.value}"
    if node.kind == "index":
        base, key = canonical(node.children[0]), _key(node.children[1])
        return None if base is None or key is None else f"{base}[{key}]"
    return None


def _key(node: Node) -> str | None:
    if node.kind == "lit":
        return repr(node.value[1])
    return canonical(node)


# --- facts: what an expression being true (or false) proves ----------------------------------
Facts = frozenset[str]


@lru_cache(maxsize=None)
def true_facts(node: Node) -> Facts:
    if node.kind == "call" and node.value == "has" and len(node.children) == 1:
        path = canonical(node.children[0])
        return frozenset({f"set:{path}"}) if path else frozenset()
    if node.kind == "rel" and node.value == "in":
        key, container = node.children
        path = canonical(container)
        written = _key(key)
        return frozenset({f"set:{path}[{written}]"}) if path and written else frozenset()
    if node.kind == "rel" and node.value == "eq":
        left, right = node.children
        if canonical(left) == "request.operation" and right.kind == "lit" and right.value[1] == "UPDATE":
            return frozenset({UPDATE})
        if left.kind == "call" and left.value == "type" and right.kind == "ident" and right.value == "string":
            path = canonical(left.children[0])
            return frozenset({f"string:{path}"}) if path else frozenset()
        return frozenset()
    if node.kind == "and":
        return true_facts(node.children[0]) | true_facts(node.children[1])
    if node.kind == "or":
        return true_facts(node.children[0]) & true_facts(node.children[1])
    if node.kind == "not":
        return false_facts(node.children[0])
    return frozenset()


@lru_cache(maxsize=None)
def false_facts(node: Node) -> Facts:
    if node.kind == "not":
        return true_facts(node.children[0])
    if node.kind == "or":
        return false_facts(node.children[0]) | false_facts(node.children[1])
    if node.kind == "and":
        return false_facts(node.children[0]) & false_facts(node.children[1])
    return frozenset()


# --- schema types -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Typed:
    """A value read from the job: its schema node."""

    schema: Mapping[str, Any]
    root: str  # object or oldObject

    @property
    def is_map(self) -> bool:
        return "additionalProperties" in self.schema and "properties" not in self.schema

    @property
    def is_object(self) -> bool:
        return "properties" in self.schema

    @property
    def int_or_string(self) -> bool:
        return bool(self.schema.get("x-kubernetes-int-or-string"))


@dataclass
class Checker:
    schema: Mapping[str, Any]
    variables: dict[str, Typed | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    reads: set[str] = field(default_factory=set)  # every field and key read found in the schema

    def root(self, name: str) -> Typed:
        properties = {**self.schema.get("properties", {}), "metadata": OBJECT_META}
        return Typed({**self.schema, "properties": properties}, name)

    def report(self, node: Node, problem: str) -> None:
        self.problems.append(f"{canonical(node) or node.kind}: {problem}")

    def walk(self, node: Node, env: Mapping[str, Typed | None], facts: Facts, *, raw: bool = False) -> Typed | None:
        """The schema node ``node`` reads (None for a value that is not part of the job),
        reporting every read the schema and ``facts`` do not justify. ``raw``: the value is
        handed to ``string()`` or ``type()``, where an int-or-string may go as it is."""
        kind, kids = node.kind, node.children
        if kind == "ident":
            if node.value in env:
                return env[node.value]
            return self.root(node.value) if node.value in ROOTS else None
        if kind == "select":
            return self._select(node, env, facts, raw)
        if kind == "index":
            return self._index(node, env, facts, raw)
        if kind == "and":
            self.walk(kids[0], env, facts)
            self.walk(kids[1], env, facts | true_facts(kids[0]))
            return None
        if kind == "or":
            self.walk(kids[0], env, facts)
            self.walk(kids[1], env, facts | false_facts(kids[0]))
            return None
        if kind == "cond":
            self.walk(kids[0], env, facts)
            then = self.walk(kids[1], env, facts | true_facts(kids[0]))
            otherwise = self.walk(kids[2], env, facts | false_facts(kids[0]))
            return then or otherwise
        if kind == "call":
            return self._call(node, env, facts)
        if kind == "method":
            return self._method(node, env, facts)
        if kind == "rel":
            left, right = (self.walk(k, env, facts) for k in kids)
            self._compare(node, left, kids[1])
            self._compare(node, right, kids[0])
            return None
        if kind == "arith":
            left, right = (self.walk(k, env, facts) for k in kids)
            # list + list: the same items (containers + initContainers)
            return left if left is not None and left.schema.get("type") == "array" else right
        for kid in kids:
            self.walk(kid, env, facts)
        return None

    # --- reads ------------------------------------------------------------------------------
    def _select(self, node: Node, env: Mapping[str, Typed | None], facts: Facts, raw: bool) -> Typed | None:
        (base,) = node.children
        if base.kind == "ident" and base.value == "variables":
            return self.variables.get(str(node.value))
        typed = self.walk(base, env, facts)
        if typed is None:
            return None
        if base.kind == "ident" and base.value == "oldObject" and UPDATE not in facts:
            self.report(node, "oldObject read where the request may be a CREATE (oldObject is null)")
        if typed.is_map:
            self.report(node, f"field {node.value!r} selected on a map (additionalProperties): index it")
            return self._value(node, Typed(typed.schema["additionalProperties"], typed.root), facts, raw)
        properties = typed.schema.get("properties")
        if properties is None:
            return None  # an object the schema leaves open: nothing to check against
        if node.value not in properties:
            self.report(node, f"no field {node.value!r} in the schema (fields: {', '.join(sorted(properties))})")
            return None
        self.reads.add(canonical(node) or "")
        is_root = canonical(base) in ROOTS
        optional = node.value not in typed.schema.get("required", ()) and not (is_root and node.value in ALWAYS_SET)
        if optional and f"set:{canonical(node)}" not in facts:
            self.report(node, "optional field read where nothing proves it set (guard it with has())")
        return self._value(node, Typed(properties[node.value], typed.root), facts, raw)

    def _index(self, node: Node, env: Mapping[str, Typed | None], facts: Facts, raw: bool) -> Typed | None:
        base, key = node.children
        typed = self.walk(base, env, facts)
        self.walk(key, env, facts)
        if typed is None:
            return None
        if typed.schema.get("type") == "array":
            return self._value(node, Typed(typed.schema.get("items", {}), typed.root), facts, raw)
        if typed.is_object:
            self.report(node, "an object indexed like a map: select its field")
            return None
        if typed.is_map:
            self.reads.add(canonical(node) or "")
            if f"set:{canonical(node)}" not in facts:
                self.report(node, "map key read where nothing proves it present (guard it with 'key' in map)")
            return self._value(node, Typed(typed.schema["additionalProperties"], typed.root), facts, raw)
        return None

    def _value(self, node: Node, typed: Typed, facts: Facts, raw: bool) -> Typed:
        if typed.int_or_string and not raw and f"string:{canonical(node)}" not in facts:
            self.report(node, "int-or-string value used as it is: pass it through string() (then quantity())")
        return typed

    # --- calls --------------------------------------------------------------------------------
    def _call(self, node: Node, env: Mapping[str, Typed | None], facts: Facts) -> Typed | None:
        if node.value == "has" and len(node.children) == 1 and node.children[0].kind == "select":
            selected = node.children[0]
            typed = self.walk(selected.children[0], env, facts)
            if canonical(selected.children[0]) == "oldObject" and UPDATE not in facts:
                self.report(selected, "oldObject read where the request may be a CREATE (oldObject is null)")
            if typed is not None and typed.is_map:
                self.report(selected, "has() on a map key: test it with 'key' in map")
            elif typed is not None and typed.is_object and selected.value not in typed.schema["properties"]:
                self.report(selected, f"no field {selected.value!r} in the schema")
            return None
        raw = node.value in ("string", "type") and len(node.children) == 1
        for kid in node.children:
            self.walk(kid, env, facts, raw=raw)
        return None

    def _method(self, node: Node, env: Mapping[str, Typed | None], facts: Facts) -> Typed | None:
        target, *arguments = node.children
        typed = self.walk(target, env, facts)
        if node.value in MACROS and len(arguments) in (2, 3) and arguments[0].kind == "ident":
            variable = str(arguments[0].value)
            element: Typed | None = None
            inner = facts
            if typed is not None and typed.schema.get("type") == "array":
                element = Typed(typed.schema.get("items", {}), typed.root)
            elif typed is not None and typed.is_map:
                path = canonical(target)
                inner = facts | {f"set:{path}[{variable}]"} if path else facts
            for body in arguments[1:]:
                self.walk(body, {**env, variable: element}, inner)
            # a list filtered is a list of the same items; a map filtered is a list of its keys
            return typed if node.value == "filter" and element is not None else None
        for argument in arguments:
            self.walk(argument, env, facts)
        return None

    def _compare(self, node: Node, typed: Typed | None, other: Node) -> None:
        if typed is None or other.kind != "lit" or typed.int_or_string:
            return
        expected = typed.schema.get("type")
        written = other.value[0]
        if expected in ("string", "integer", "boolean", "number") and written != "null" and written != expected:
            self.report(node, f"{expected} field compared with a {written} literal")


def check_expression(checker: Checker, expression: str, facts: Iterable[str] = ()) -> list[str]:
    before = len(checker.problems)
    checker.walk(parse(expression), {}, frozenset(facts))
    return checker.problems[before:]


def unshared(policy: Mapping[str, Any]) -> dict[str, Any]:
    """The policy with each shared part (policies.vap.shared_parts) written back where it is
    read: the API server evaluates it there, first read, with what holds there."""
    shared = {v["name"]: v["expression"] for v in policy["spec"].get("variables", ()) if v["name"].startswith(SHARED)}
    def expand(text: str) -> str:
        while True:
            expanded = re.sub(r"variables\.(" + SHARED + r"\d+)\b", lambda m: f"({shared[m.group(1)]})", text)
            if expanded == text:
                return text
            text = expanded

    spec = policy["spec"]
    return {**policy, "spec": {
        **spec,
        "variables": [{**v, "expression": expand(v["expression"])} for v in spec.get("variables", ())
                      if v["name"] not in shared],
        "validations": [{k: expand(x) if k in ("expression", "messageExpression") else x for k, x in v.items()}
                        for v in spec.get("validations", ())]}}


def policy_problems(policy: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Every unjustified read in a ValidatingAdmissionPolicy's variables, validations and
    messages, as ``<variable or validation>: <path>: <problem>``."""
    checker = Checker(schema)
    found: list[str] = []
    policy = unshared(policy)
    for variable in policy["spec"].get("variables", ()):
        # Evaluated wherever it is first read: it must hold on its own.
        checker.variables[variable["name"]] = checker.walk(parse(variable["expression"]), {}, frozenset())
        found += [f"variables.{variable['name']}: {p}" for p in checker.problems]
        checker.problems.clear()
    for index, validation in enumerate(policy["spec"].get("validations", ())):
        expression = validation["expression"]
        found += [f"validations[{index}].expression: {p}" for p in check_expression(checker, expression)]
        if "messageExpression" in validation:
            # Evaluated only for a failed validation: where its expression was false.
            failed = false_facts(parse(expression))
            found += [f"validations[{index}].messageExpression: {p}"
                      for p in check_expression(checker, validation["messageExpression"], failed)]
    return found
