"""A policy's repeated CEL written once: every part that recurs (the same text, at least
``SHORTEST`` characters, reading no comprehension variable) becomes a variable of the policy,
``variables.shared<N>``, and every expression stays under ``LONGEST`` characters by moving its
largest such part into a variable too.

The answers do not change: the API server evaluates a variable lazily, where it is first read,
once per evaluation, and a read of it is that part's value (an error included), so a part
guarded where it was written is evaluated only where its guard held, as before. The checks
become shorter to read, and cheaper: a part used N times is evaluated once.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from policies.vap.cel_syntax import MACROS, Tree, parse, render

SHORTEST = 40
LONGEST = 4000
PREFIX = "shared"
ROOTS = frozenset({"object", "oldObject", "params", "request", "variables", "namespaceObject", "authorizer",
                   "int", "uint", "double", "bool", "string", "bytes", "list", "map", "type", "null_type"})


def _children(tree: Tree) -> Iterator[Tree]:
    """The subtrees a variable may stand for: not has()'s argument (it must stay a selection)."""
    if tree[0] == "call" and tree[1] == "has":
        return
    yield from _subtrees(tree)


def _subtrees(tree: Tree) -> Iterator[Tree]:
    for part in tree[1:]:
        if isinstance(part, tuple) and part and isinstance(part[0], str) and part[0] in _KINDS:
            yield part
        elif isinstance(part, tuple):
            for item in part:
                if isinstance(item, tuple) and item and item[0] in _KINDS:
                    yield item
                elif isinstance(item, tuple):  # a map's (key, value)
                    yield from (x for x in item if isinstance(x, tuple))


_KINDS = frozenset({"ident", "lit", "select", "index", "call", "method", "unary", "binary", "cond", "list", "map"})


def _free(tree: Tree, memo: dict[int, frozenset[str]]) -> frozenset[str]:
    """The identifiers a subtree reads that it does not bind."""
    key = id(tree)
    if key in memo:
        return memo[key]
    if tree[0] == "ident":
        found = frozenset({str(tree[1])})
    elif tree[0] == "method" and tree[2] in MACROS and tree[3] and tree[3][0][0] == "ident":
        bound = str(tree[3][0][1])
        found = _free(tree[1], memo).union(*(_free(a, memo) - {bound} for a in tree[3][1:]))
    else:
        found = frozenset().union(*(_free(c, memo) for c in _subtrees(tree)))
    memo[key] = found
    return found


def _candidates(tree: Tree, memo: dict[int, frozenset[str]]) -> Iterator[str]:
    if tree[0] not in ("ident", "lit") and _free(tree, memo) <= ROOTS:
        text = render(tree)
        if len(text) >= SHORTEST:
            yield text
    for child in _children(tree):
        yield from _candidates(child, memo)


def _replace(tree: Tree, names: Mapping[str, str], keep: str | None = None) -> Tree:
    """``tree`` with every part named in ``names`` read from its variable (not ``keep``: the
    definition of that variable itself)."""
    text = render(tree)
    if text in names and text != keep:
        return ("select", ("ident", "variables"), names[text])
    if tree[0] == "call" and tree[1] == "has":
        return tree
    return _rebuild(tree, lambda t: _replace(t, names))


def _rebuild(tree: Tree, change: Any) -> Tree:
    parts: list[Any] = [tree[0]]
    for part in tree[1:]:
        if isinstance(part, tuple) and part and part[0] in _KINDS:
            parts.append(change(part))
        elif isinstance(part, tuple):
            parts.append(tuple(change(i) if i and i[0] in _KINDS else tuple(change(x) for x in i) for i in part))
        else:
            parts.append(part)
    return tuple(parts)


def share(spec: dict[str, Any]) -> dict[str, Any]:
    """The policy spec with its repeated and overlong parts moved into variables."""
    variables = [(v["name"], parse(v["expression"])) for v in spec.get("variables", ())]
    fields = [(i, key, parse(v[key])) for i, v in enumerate(spec.get("validations", ()))
              for key in ("expression", "messageExpression") if key in v]
    memo: dict[int, frozenset[str]] = {}
    counts = Counter(t for _, tree in [*variables, *((k, t) for _, k, t in fields)] for t in _candidates(tree, memo))
    names = {text: f"{PREFIX}{n}" for n, text in enumerate(t for t, c in counts.most_common() if c > 1)}
    trees = {name: _replace(parse(text), names, keep=text) for text, name in names.items()}
    variables = [(name, _replace(tree, names)) for name, tree in variables]
    fields = [(i, key, _replace(tree, names)) for i, key, tree in fields]
    trees, variables, fields = _inline_single_uses(trees, variables, fields)
    trees = _shorten(trees, variables, fields)
    return _spec(spec, trees, variables, fields)


def _reads(tree: Tree) -> Iterator[str]:
    if tree[0] == "select" and tree[1] == ("ident", "variables"):
        yield str(tree[2])
    for child in _children(tree):
        yield from _reads(child)


def _inline_single_uses(trees: dict[str, Tree], variables: list[tuple[str, Tree]],
                        fields: list[tuple[int, str, Tree]]) -> tuple[Any, Any, Any]:
    """A shared part read once (it was inside another shared part) goes back where it was."""
    while True:
        uses = Counter(r for tree in [*trees.values(), *(t for _, t in variables), *(t for _, _, t in fields)]
                       for r in _reads(tree))
        once = {name: tree for name, tree in trees.items() if uses[name] < 2}
        if not once:
            return trees, variables, fields

        def inline(tree: Tree) -> Tree:
            if tree[0] == "select" and tree[1] == ("ident", "variables") and tree[2] in once:
                return inline(once[str(tree[2])])
            return _rebuild(tree, inline)

        trees = {name: inline(tree) for name, tree in trees.items() if name not in once}
        variables = [(name, inline(tree)) for name, tree in variables]
        fields = [(i, key, inline(tree)) for i, key, tree in fields]


def _shorten(trees: dict[str, Tree], variables: list[tuple[str, Tree]], fields: list[tuple[int, str, Tree]]) -> dict[str, Tree]:
    """Every expression at most LONGEST characters: its largest part that may be a variable, moved
    into one, until it fits. (Only the parts that read no comprehension variable can move.)"""
    everything = [*trees.items(), *variables, *((f"{i}.{k}", t) for i, k, t in fields)]
    for index, (owner, tree) in enumerate(everything):
        while len(render(tree)) > LONGEST:
            memo: dict[int, frozenset[str]] = {}
            parts = sorted(set(_candidates(tree, memo)) - {render(tree)}, key=len, reverse=True)
            if not parts:
                break  # nothing left to move: the export test reports it
            name = f"{PREFIX}{1 + max((int(n[len(PREFIX):]) for n in trees), default=-1)}"
            trees[name] = parse(parts[0])
            tree = _replace(tree, {parts[0]: name})
            everything.append((name, trees[name]))
        everything[index] = (owner, tree)
    for owner, tree in everything:
        if owner in trees:
            trees[owner] = tree
    for position, (name, _) in enumerate(variables):
        variables[position] = (name, dict(everything)[name])
    for position, (i, key, _) in enumerate(fields):
        fields[position] = (i, key, dict(everything)[f"{i}.{key}"])
    return trees


def _spec(spec: dict[str, Any], trees: dict[str, Tree], variables: list[tuple[str, Tree]],
          fields: list[tuple[int, str, Tree]]) -> dict[str, Any]:
    """Each shared part declared before its first reader, after what it reads."""
    ordered: list[tuple[str, Tree]] = []
    placed: set[str] = set()

    def place(tree: Tree) -> None:
        for name in _reads(tree):
            if name in trees and name not in placed:
                placed.add(name)
                place(trees[name])
                ordered.append((name, trees[name]))

    for name, tree in variables:
        place(tree)
        ordered.append((name, tree))
    for _, _, tree in fields:
        place(tree)
    validations = [dict(v) for v in spec.get("validations", ())]
    for i, key, tree in fields:
        validations[i][key] = render(tree)
    return {**spec, "variables": [{"name": n, "expression": render(t)} for n, t in ordered],
            "validations": validations}
