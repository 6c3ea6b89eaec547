"""The API server's CEL type check, for what the exported policies write: each expression typed,
each call matched against the declarations (``declarations``), as cel-go's checker does.

Two uses, as the API server has two: when a policy is created its expressions are compiled with
``object``, ``oldObject`` and ``params`` typed ``dyn``, and a problem refuses the policy
(``compile_problems``); afterwards a controller checks them against the schema of the resource
the policy matches and reports problems as ``status.typeChecking`` warnings
(``policy_problems`` with typed roots). Either way a variable that does not compile is ``dyn`` to
whatever reads it, a validation must be ``bool`` and a ``messageExpression`` ``string``.

Types: ``int uint double bool string bytes null type dyn timestamp duration`` and the library
types as text; ``("list", T)``, ``("map", K, V)``; ``("object", path)`` for a schema object,
named by its path as cel-go names them (two objects of the same shape at two paths are two
types: ``containers + initContainers`` has no overload); ``EMPTY``, the element of ``[]``.

Not modelled: protobuf messages, optional types (``?.``, ``optional.of``), two-variable
comprehensions (Kubernetes 1.32+), the cost estimate, and the functions the declarations leave
out (every such call is refused).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from webhook.cel import declarations
from webhook.cel.syntax import Node, parse

Type = Union[str, tuple[Any, ...]]
DYN, EMPTY = "dyn", "_"
NUMBERS = ("int", "uint", "double")
TYPE_NAMES = {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"}
_ORDERED = ("int", "uint", "double", "string", "bytes", "bool", "timestamp", "duration")
# The operators' overloads (cel-go's standard declarations), with CrossTypeNumericComparisons.
Signature = tuple[tuple[Type, ...], Type]
_SAME_TYPE_ORDER: list[Signature] = [((t, t), "bool") for t in _ORDERED]
_CROSS_NUMERIC_ORDER: list[Signature] = [((a, b), "bool") for a in NUMBERS for b in NUMBERS if a != b]
OPERATORS: dict[str, list[Signature]] = {
    "add": [(("int", "int"), "int"), (("uint", "uint"), "uint"), (("double", "double"), "double"),
            (("string", "string"), "string"), (("bytes", "bytes"), "bytes"),
            ((("list", "A"), ("list", "A")), ("list", "A")), (("duration", "duration"), "duration"),
            (("timestamp", "duration"), "timestamp"), (("duration", "timestamp"), "timestamp")],
    "sub": [(("int", "int"), "int"), (("uint", "uint"), "uint"), (("double", "double"), "double"),
            (("duration", "duration"), "duration"), (("timestamp", "timestamp"), "duration"),
            (("timestamp", "duration"), "timestamp")],
    "mul": [((t, t), t) for t in NUMBERS],
    "div": [((t, t), t) for t in NUMBERS],
    "mod": [(("int", "int"), "int"), (("uint", "uint"), "uint")],
    "order": _SAME_TYPE_ORDER + _CROSS_NUMERIC_ORDER,
    "in": [(("A", ("list", "A")), "bool"), (("A", ("map", "A", "B")), "bool")],
    "neg": [(("int",), "int"), (("double",), "double")],
    "cond": [(("A", "A"), "A")],
}
ORDER = {"lt", "le", "gt", "ge"}


def schema_type(schema: Mapping[str, Any], path: str, objects: dict[str, Mapping[str, Any]]) -> Type:
    """The CEL type the API server gives a structural schema node at ``path`` (object types are
    registered in ``objects`` by path)."""
    if schema.get("x-kubernetes-int-or-string"):
        return DYN
    kind = schema.get("type")
    if kind == "object" or "properties" in schema or "additionalProperties" in schema:
        if "properties" in schema:
            objects[path] = schema
            return ("object", path)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            return ("map", "string", schema_type(extra, f"{path}.@", objects))
        return DYN  # preserve-unknown-fields, or an open object
    if kind == "array":
        return ("list", schema_type(schema.get("items", {}), f"{path}.@", objects))
    formats = {"byte": "bytes", "date-time": "timestamp", "duration": "duration"}
    scalar = {"string": "string", "integer": "int", "number": "double", "boolean": "bool"}
    if kind == "string" and schema.get("format") in formats:
        return formats[str(schema["format"])]
    return scalar.get(str(kind), DYN)


def render(t: Type) -> str:
    if isinstance(t, str):
        return t
    if t[0] == "object":
        return str(t[1])
    return f"{t[0]}({', '.join(render(a) for a in t[1:])})"


def _is_param(t: Type) -> bool:
    return isinstance(t, str) and len(t) == 1 and t.isupper()


def _assignable(param: Type, arg: Type, bound: dict[str, Type]) -> bool:
    if _is_param(param):
        assert isinstance(param, str)
        held = bound.get(param)
        if held is None or (_vague(held) and not _vague(arg) and _assignable(held, arg, {})):
            bound[param] = arg  # [] takes the type of what it meets
            return True
        return _assignable(held, arg, bound)
    if arg in (DYN, EMPTY) or param in (DYN, EMPTY):
        return True
    if arg == "null":
        return param == "null" or (isinstance(param, tuple) and param[0] in ("object", "map", "list"))
    if isinstance(param, tuple) and isinstance(arg, tuple):
        return (param[0] == arg[0] and len(param) == len(arg)
                and all(_assignable(p, a, bound) for p, a in zip(param[1:], arg[1:])))
    return param == arg


def _vague(t: Type) -> bool:
    """Holds the element type of an empty list literal, still free."""
    return t == EMPTY or (isinstance(t, tuple) and t[0] != "object" and any(_vague(a) for a in t[1:]))


def _substitute(t: Type, bound: Mapping[str, Type]) -> Type:
    if _is_param(t):
        assert isinstance(t, str)
        found = bound.get(t, DYN)
        return DYN if found == EMPTY else found
    if isinstance(t, tuple) and t[0] != "object":
        return (t[0], *(_substitute(a, bound) for a in t[1:]))
    return t


def _join(types: Sequence[Type]) -> Type:
    return types[0] if types and all(t == types[0] for t in types) else DYN


@dataclass
class Scope:
    """What an expression may name: the roots, the declared variables (in order) and the object
    types, by path."""

    roots: dict[str, Type]
    objects: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    variables: dict[str, Type] = field(default_factory=dict)
    fields: dict[str, Callable[[str], Type | None]] = field(default_factory=dict)

    def field_type(self, path: str, name: str) -> Type | None:
        if path == "variables":
            return self.variables.get(name)
        if path in self.fields:
            return self.fields[path](name)
        properties = self.objects[path].get("properties", {})
        if name not in properties:
            return None
        return schema_type(properties[name], f"{path}.{name}", self.objects)


@dataclass
class Check:
    scope: Scope
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> Type:
        if text not in self.problems:
            self.problems.append(text)
        return DYN

    def type_of(self, node: Node, local: Mapping[str, Type]) -> Type:  # noqa: C901 - one case per node kind
        kind, kids = node.kind, node.children
        if kind == "lit":
            token = node.value[2]
            return {"STRING_LIT": "string", "MLSTRING_LIT": "string", "INT_LIT": "int", "UINT_LIT": "uint",
                    "FLOAT_LIT": "double", "BOOL_LIT": "bool", "NULL_LIT": "null", "BYTES_LIT": "bytes"}[token]
        if kind == "ident":
            return self._ident(str(node.value), local)
        if kind == "select":
            return self._select(self.type_of(kids[0], local), str(node.value))
        if kind == "index":
            return self._index(self.type_of(kids[0], local), self.type_of(kids[1], local))
        if kind in ("and", "or", "not"):
            for kid in kids:
                self._expect(kid, local, "bool", {"and": "_&&_", "or": "_||_", "not": "!_"}[kind])
            return "bool"
        if kind == "neg":
            return self._operator("-_", OPERATORS["neg"], [self.type_of(kids[0], local)])
        if kind == "cond":
            self._expect(kids[0], local, "bool", "_?_:_")
            return self._operator("_?_:_", OPERATORS["cond"], [self.type_of(k, local) for k in kids[1:]])
        if kind == "rel":
            return self._relation(str(node.value), [self.type_of(k, local) for k in kids])
        if kind == "arith":
            symbol = {"add": "_+_", "sub": "_-_", "mul": "_*_", "div": "_/_", "mod": "_%_"}[str(node.value)]
            return self._operator(symbol, OPERATORS[str(node.value)], [self.type_of(k, local) for k in kids])
        if kind == "list":
            return ("list", self._homogeneous([self.type_of(k, local) for k in kids]))
        if kind == "map":
            keys = [self.type_of(k, local) for k in kids[0::2]]
            values = [self.type_of(k, local) for k in kids[1::2]]
            return ("map", self._homogeneous(keys), self._homogeneous(values))
        if kind == "call":
            return self._call(node, local)
        if kind == "method":
            return self._method(node, local)
        return self.problem(f"CEL syntax not modelled: {kind}")

    def _expect(self, node: Node, local: Mapping[str, Type], wanted: Type, where: str) -> None:
        found = self.type_of(node, local)
        if not _assignable(wanted, found, {}):
            self.problem(f"found no matching overload for '{where}' applied to '({render(found)})'")

    def _ident(self, name: str, local: Mapping[str, Type]) -> Type:
        if name in local:
            return local[name]
        if name in self.scope.roots:
            return self.scope.roots[name]
        if name in TYPE_NAMES:
            return "type"
        return self.problem(f"undeclared reference to '{name}'")

    def _select(self, base: Type, name: str) -> Type:
        if base in (DYN, EMPTY):
            return DYN
        if isinstance(base, tuple) and base[0] == "map":
            return base[2] if _assignable(base[1], "string", {}) else self.problem(
                f"type '{render(base)}' does not support field selection")
        if isinstance(base, tuple) and base[0] == "object":
            found = self.scope.field_type(str(base[1]), name)
            return found if found is not None else self.problem(f"undefined field '{name}' (in {render(base)})")
        return self.problem(f"type '{render(base)}' does not support field selection")

    def _index(self, base: Type, key: Type) -> Type:
        if base in (DYN, EMPTY):
            return DYN
        if isinstance(base, tuple) and base[0] == "list" and _assignable("int", key, {}) | _assignable("uint", key, {}):
            return base[1] if base[1] != EMPTY else DYN
        if isinstance(base, tuple) and base[0] == "map" and _assignable(base[1], key, {}):
            return base[2] if base[2] != EMPTY else DYN
        return self.problem(f"found no matching overload for '_[_]' applied to '({render(base)}, {render(key)})'")

    def _homogeneous(self, types: list[Type]) -> Type:
        typed = [t for t in types if t not in (DYN, EMPTY)]
        for other in typed[1:]:
            if not _assignable(typed[0], other, {}):
                self.problem(f"expected type '{render(typed[0])}' but found '{render(other)}'")
        if typed:
            return typed[0]
        return DYN if types else EMPTY

    def _relation(self, operator: str, args: list[Type]) -> Type:
        if operator in ("eq", "ne"):
            left, right = args
            numbers = left in NUMBERS and right in NUMBERS
            if not numbers and not _assignable(left, right, {}) and not _assignable(right, left, {}):
                symbol = "_==_" if operator == "eq" else "_!=_"
                self.problem(f"found no matching overload for '{symbol}' applied to '({render(left)}, {render(right)})'")
            return "bool"
        if operator == "in":
            return self._operator("@in", OPERATORS["in"], args)
        symbol = {"lt": "_<_", "le": "_<=_", "gt": "_>_", "ge": "_>=_"}[operator]
        return self._operator(symbol, OPERATORS["order"], args)

    def _operator(self, symbol: str, overloads: Sequence[tuple[tuple[Type, ...], Type]], args: list[Type]) -> Type:
        results = []
        for params, result in overloads:
            bound: dict[str, Type] = {}
            if len(params) == len(args) and all(_assignable(p, a, bound) for p, a in zip(params, args)):
                results.append(_substitute(result, bound))
        if not results:
            return self.problem(f"found no matching overload for '{symbol}' applied to "
                                f"'({', '.join(render(a) for a in args)})'")
        return _join(results)

    # --- calls ----------------------------------------------------------------------------
    def _call(self, node: Node, local: Mapping[str, Type]) -> Type:
        name = str(node.value)
        if name == "has":
            if len(node.children) != 1 or node.children[0].kind != "select":
                return self.problem("invalid argument to has() macro")
            selected = node.children[0]
            self._select(self.type_of(selected.children[0], local), str(selected.value))
            return "bool"
        return self._function(name, False, [self.type_of(k, local) for k in node.children])

    def _method(self, node: Node, local: Mapping[str, Type]) -> Type:
        target, *arguments = node.children
        name = str(node.value)
        if target.kind == "ident" and target.value not in local and target.value not in self.scope.roots:
            qualified = f"{target.value}.{name}"  # a namespaced global: strings.quote(s)
            if declarations.overloads(qualified, member=False):
                return self._function(qualified, False, [self.type_of(a, local) for a in arguments])
        if name in declarations.MACROS and arguments and arguments[0].kind == "ident":
            return self._comprehension(name, self.type_of(target, local), arguments, local)
        return self._function(name, True, [self.type_of(target, local), *(self.type_of(a, local) for a in arguments)])

    def _comprehension(self, macro: str, range_type: Type, arguments: list[Node], local: Mapping[str, Type]) -> Type:
        if len(arguments) == 3 and macro != "map":
            return self.problem(f"two-variable comprehension {macro}(i, v, …) needs Kubernetes 1.32")
        if len(arguments) not in (2, 3):
            return self.problem(f"wrong number of arguments to {macro}()")
        if isinstance(range_type, tuple) and range_type[0] == "list":
            element = range_type[1] if range_type[1] != EMPTY else DYN
        elif isinstance(range_type, tuple) and range_type[0] == "map":
            element = range_type[1]
        elif range_type in (DYN, EMPTY):
            element = DYN
        else:
            return self.problem(f"expression of type '{render(range_type)}' cannot be range of a comprehension")
        inner = {**local, str(arguments[0].value): element}
        for predicate in arguments[1:-1] if macro == "map" else arguments[1:]:
            self._expect(predicate, inner, "bool", macro)
        if macro == "map":
            return ("list", self.type_of(arguments[-1], inner))
        return ("list", element) if macro == "filter" else "bool"

    def _function(self, name: str, member: bool, args: list[Type]) -> Type:
        candidates = declarations.overloads(name, member=member)
        shown = (f"{render(args[0])}.({', '.join(render(a) for a in args[1:])})" if member
                 else f"({', '.join(render(a) for a in args)})")
        if not candidates and not declarations.overloads(name, member=not member):
            return self.problem(f"undeclared reference to '{name}'")
        results = []
        for overload in candidates:
            bound: dict[str, Type] = {}
            if len(overload.arguments) == len(args) and all(
                    _assignable(_parse(p), a, bound) for p, a in zip(overload.arguments, args)):
                results.append(_substitute(_parse(overload.result), bound))
        if not results:
            return self.problem(f"found no matching overload for '{name}' applied to '{shown}'")
        return _join(results)


def _parse(text: str) -> Type:
    """``list(map(string, A))`` → ("list", ("map", "string", "A"))."""
    text = text.strip()
    if "(" not in text:
        return text
    head, inner = text[:-1].split("(", 1)
    return (head, *(_parse(p) for p in declarations._split_top(inner)))


def expression_problems(scope: Scope, expression: str, wanted: Type | None = None) -> tuple[Type, list[str]]:
    """The type of ``expression`` in ``scope``, and what the type check finds wrong with it."""
    check = Check(scope)
    found = check.type_of(parse(expression), {})
    if wanted is not None and not check.problems and found != wanted:
        check.problem(f"must evaluate to {wanted} but got {render(found)}")
    return found, check.problems


def policy_problems(policy: Mapping[str, Any], roots: Mapping[str, Type],
                    objects: Mapping[str, Mapping[str, Any]] | None = None, *, created: bool = False) -> list[str]:
    """Every type-check problem of a ValidatingAdmissionPolicy, as ``<where>: <problem>``.

    ``created``: as when the policy is created (its variables in order, one that does not
    compile ``dyn`` to its readers; validations ``bool``, messageExpressions ``string``).
    Otherwise as the API server's type-checking controller, whose ``status.typeChecking``
    warnings name only matchConditions, validations, messageExpressions and auditAnnotations
    (a variable's problem shows where it is read only through its type)."""
    scope = Scope({**REQUEST_ROOTS, **roots}, dict(objects or {}), fields=dict(REQUEST_FIELDS))
    scope.roots["variables"] = ("object", "variables")
    spec = policy.get("spec", {})
    found: list[str] = []
    for variable in spec.get("variables", ()):
        typed, problems = expression_problems(scope, variable["expression"])
        scope.variables[variable["name"]] = DYN if problems else typed
        if created:
            found += [f"variables.{variable['name']}: {p}" for p in problems]
    wanted = [("matchConditions", "expression", "bool"), ("validations", "expression", "bool"),
              ("validations", "messageExpression", "string"), ("auditAnnotations", "valueExpression", "string")]
    for section, key, kind in wanted:
        for index, item in enumerate(spec.get(section, ())):
            if key in item:
                _, problems = expression_problems(scope, item[key], kind if created else None)
                found += [f"{section}[{index}].{key}: {p}" for p in problems]
    return found


def compile_problems(policy: Mapping[str, Any]) -> list[str]:
    """What refuses the policy when it is created: its expressions compiled with the object and
    params as ``dyn``."""
    dyn = {"object": DYN, "oldObject": DYN, "params": DYN, "namespaceObject": DYN}
    return policy_problems(policy, dyn, created=True)


# The admission request as the API server declares it to CEL (AdmissionRequest's fields).
_KIND: dict[str, Type] = {"group": "string", "version": "string", "kind": "string"}
_RESOURCE: dict[str, Type] = {"group": "string", "version": "string", "resource": "string"}
_USER: dict[str, Type] = {"username": "string", "uid": "string", "groups": ("list", "string"),
         "extra": ("map", "string", ("list", "string"))}
_REQUEST: dict[str, Type] = {"kind": ("object", "request.kind"), "resource": ("object", "request.resource"), "subResource": "string",
            "requestKind": ("object", "request.kind"), "requestResource": ("object", "request.resource"),
            "requestSubResource": "string", "name": "string", "namespace": "string", "operation": "string",
            "userInfo": ("object", "request.userInfo"), "dryRun": "bool", "options": DYN}
def _fields(declared: Mapping[str, Type]) -> Callable[[str], Type | None]:
    return lambda name: declared.get(name)


REQUEST_FIELDS: dict[str, Callable[[str], Type | None]] = {
    "request": _fields(_REQUEST), "request.kind": _fields(_KIND), "request.resource": _fields(_RESOURCE),
    "request.userInfo": _fields(_USER)}
REQUEST_ROOTS: dict[str, Type] = {"request": ("object", "request")}
