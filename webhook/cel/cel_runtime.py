"""CEL programs with the Kubernetes libraries, and what an evaluation costs.

The cost is a model of cel-go's runtime cost (the figure the API server holds against its
limits), made pessimistic on purpose so that staying under a limit here means staying under
it in the API server: every node of the parse tree costs 1 (cel-go charges per evaluated
node of its smaller tree), both sides of ``&&`` and ``||`` are evaluated and charged (cel-go
stops at the first that decides), and every string, list or map handed to an operation costs
its size (strings a tenth of their length, as cel-go's traversal factor; lists and maps one
per element) each time it is handed on.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from webhook.cel import CelUnavailable

try:
    import celpy
    import lark
    from celpy import celtypes
    from celpy.adapter import json_to_cel
    from celpy.evaluation import CELEvalError, Evaluator

    AVAILABLE = True
except ImportError:  # the optional dependency is missing
    AVAILABLE = False

STRING_TRAVERSAL_FACTOR = 0.1


@dataclass
class Meter:
    """Cost charged so far, per expression and in all (one policy evaluation). An expression's
    own cost leaves out the variables it reads: each variable is an expression of its own,
    evaluated once, whose cost the evaluation's total holds."""

    total: int = 0
    per_expression: dict[str, int] = field(default_factory=dict)
    _nested: list[int] = field(default_factory=list, repr=False)


def available() -> bool:
    return AVAILABLE


def _require() -> None:
    if not AVAILABLE:
        raise CelUnavailable()


@lru_cache(maxsize=1)
def _environment() -> Any:
    _require()
    return celpy.Environment()


@lru_cache(maxsize=4096)
def compile_expression(expression: str) -> Any:
    """The parse tree (raises celpy.CELParseError for text that is not CEL)."""
    return _environment().compile(expression)


def _size_cost(value: Any) -> int:
    if isinstance(value, str):
        return math.ceil(len(value) * STRING_TRAVERSAL_FACTOR)
    if isinstance(value, (list, dict)):
        return len(value)
    return 0


def _compares(tree: Any) -> bool:
    first = tree.children[0] if tree.children else None
    return str(tree.data) == "relation" and str(getattr(first, "data", "")) in ("relation_eq", "relation_ne")


def _deep_size(value: Any) -> int:
    """Every element and string of a value, at every depth."""
    if isinstance(value, dict):
        return len(value) + sum(_deep_size(k) + _deep_size(v) for k, v in value.items())
    if isinstance(value, list):
        return len(value) + sum(_deep_size(v) for v in value)
    return _size_cost(value)


def _counting_evaluator() -> type:
    class CountingEvaluator(Evaluator):  # type: ignore[misc, valid-type]
        meter: Meter

        def __init__(self, ast: Any, activation: Any, meter: Meter) -> None:
            super().__init__(ast, activation)
            self.meter = meter

        def sub_evaluator(self, ast: Any) -> Any:
            return CountingEvaluator(ast, self.activation, self.meter)

        def visit(self, tree: Any) -> Any:
            self.meter.total += 1
            return super().visit(tree)

        def visit_children(self, tree: Any) -> list[Any]:
            values = super().visit_children(tree)
            if len(values) < 2:  # a node that only hands its child's value on does no work on it
                return values  # type: ignore[no-any-return]
            # Comparing lists or maps walks them whole (== on two pod templates): charged deep.
            size = _deep_size if _compares(tree) else _size_cost
            for value in values:
                if not isinstance(value, lark.Token):
                    self.meter.total += size(value)
            return values  # type: ignore[no-any-return]

        # CEL's && and || are commutative over errors: the first operand that decides the
        # answer decides it. cel-python evaluates both; cel-go stops, and so do these.
        def conditionaland(self, tree: Any) -> Any:
            return self._short_circuit(tree, "_&&_", decisive=False)

        def conditionalor(self, tree: Any) -> Any:
            return self._short_circuit(tree, "_||_", decisive=True)

        def _short_circuit(self, tree: Any, operator: str, *, decisive: bool) -> Any:
            if len(tree.children) != 2:
                return super().conditionaland(tree) if operator == "_&&_" else super().conditionalor(tree)
            left = self.visit(tree.children[0])
            if isinstance(left, celtypes.BoolType) and bool(left) is decisive:
                return left
            right = self.visit(tree.children[1])
            if isinstance(right, celtypes.BoolType) and bool(right) is decisive:
                return right  # an error on the left does not matter: the right decides
            for value in (left, right):
                if isinstance(value, CELEvalError):
                    return value
            try:
                return self.activation.resolve_function(operator)(left, right)
            except TypeError as exc:
                return CELEvalError(f"no matching overload for {operator}", exc.__class__, exc.args, tree=tree)

    return CountingEvaluator


@lru_cache(maxsize=1)
def _evaluator_class() -> type:
    _require()
    return _counting_evaluator()


def to_cel(value: Any) -> Any:
    _require()
    return json_to_cel(value)


def evaluate(expression: str, variables: Mapping[str, Any], meter: Meter | None = None) -> Any:
    """The value of ``expression``; a CEL evaluation error is returned as a CELEvalError
    (never raised), as cel-python passes errors on as values."""
    _require()
    from webhook.cel.kubernetes_library import FUNCTIONS

    ast = compile_expression(expression)
    runner = _environment().program(ast, functions=FUNCTIONS)
    meter = meter if meter is not None else Meter()
    before = meter.total
    meter._nested.append(0)
    evaluator = _evaluator_class()(ast, runner.new_activation(), meter)
    try:
        value = evaluator.evaluate(dict(variables))
    except CELEvalError as error:
        value = error
    spent = meter.total - before
    own = spent - meter._nested.pop()
    if meter._nested:
        meter._nested[-1] += spent
    meter.per_expression[expression] = max(meter.per_expression.get(expression, 0), own)
    return value


def is_bool(value: Any) -> bool:
    return AVAILABLE and isinstance(value, celtypes.BoolType)


def is_error(value: Any) -> bool:
    return AVAILABLE and isinstance(value, CELEvalError)


def lazy_variables(declared: Mapping[str, str], context: Mapping[str, Any], meter: Meter) -> Any:
    """``variables``: each evaluated the first time an expression reads it, once, as the API
    server does (an unread variable neither costs nor fails)."""
    _require()

    class Variables(celtypes.MapType):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self._evaluating: set[str] = set()

        def __contains__(self, key: object) -> bool:
            return str(key) in declared

        def __getitem__(self, key: Any) -> Any:
            name = str(key)
            if dict.__contains__(self, key):
                return dict.__getitem__(self, key)
            if name not in declared or name in self._evaluating:
                raise KeyError(name)
            self._evaluating.add(name)
            value = evaluate(declared[name], {**context, "variables": self}, meter)
            self._evaluating.discard(name)
            dict.__setitem__(self, celtypes.StringType(name), value)
            return value

        def get(self, key: Any, default: Any = None) -> Any:
            try:
                return self[key]
            except KeyError:
                return default

    return Variables()
