"""CEL text to a syntax tree and back, for the exporter's own rewriting of what it wrote
(``shared_parts``): the CEL the exporter writes, parsed with no dependency (``policies`` stays
pure), printed with only the parentheses precedence needs and every literal as written.

A tree is a tuple: ``("ident", name)``, ``("lit", text)``, ``("select", base, field)``,
``("index", base, key)``, ``("call", name, args)``, ``("method", target, name, args)``,
``("unary", op, operand)``, ``("binary", op, left, right)``, ``("cond", test, then, else)``,
``("list", items)``, ``("map", ((key, value), ...))``.
"""
from __future__ import annotations

import re
from typing import Any

Tree = tuple[Any, ...]
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>[rR]?(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"))
  | (?P<number>\d+\.\d+(?:[eE][+-]?\d+)?|0x[0-9a-fA-F]+u?|\d+u?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|[-+*/%!<>?:.,()\[\]{}])
""", re.VERBOSE)
_BINARY = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3, "in": 3,
           "+": 4, "-": 4, "*": 5, "/": 5, "%": 5}
COND, UNARY, MEMBER = 0, 6, 7


def _tokens(text: str) -> list[tuple[str, str]]:
    found, at = [], 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            raise ValueError(f"not CEL the exporter writes, at {at}: {text[at:at + 20]!r}")
        at = match.end()
        kind = str(match.lastgroup)
        if kind != "space":
            found.append((kind, match.group()))
    return found


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text) + [("end", "")]
        self.at = 0

    def peek(self) -> str:
        return self.tokens[self.at][1]

    def take(self, expected: str | None = None) -> tuple[str, str]:
        token = self.tokens[self.at]
        if expected is not None and token[1] != expected:
            raise ValueError(f"expected {expected!r}, found {token[1]!r}")
        self.at += 1
        return token

    def expression(self) -> Tree:
        test = self.binary(1)
        if self.peek() != "?":
            return test
        self.take("?")
        then = self.binary(1)
        self.take(":")
        return ("cond", test, then, self.expression())

    def binary(self, level: int) -> Tree:
        left = self.unary()
        while True:
            op = self.peek()
            rank = _BINARY.get(op) if self.tokens[self.at][0] in ("op", "name") else None
            if rank is None or rank < level:
                return left
            self.take()
            left = ("binary", op, left, self.binary(rank + 1))

    def unary(self) -> Tree:
        if self.peek() in ("!", "-") and self.tokens[self.at][0] == "op":
            op = self.take()[1]
            return ("unary", op, self.unary())
        return self.member()

    def member(self) -> Tree:
        tree = self.primary()
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                name = self.take()[1]
                if self.peek() == "(":
                    tree = ("method", tree, name, self.arguments(")"))
                else:
                    tree = ("select", tree, name)
            else:
                key = self.expression()
                self.take("]")
                tree = ("index", tree, key)
        return tree

    def arguments(self, close: str) -> tuple[Tree, ...]:
        self.take()
        found = []
        while self.peek() != close:
            found.append(self.expression())
            if self.peek() == ",":
                self.take()
        self.take(close)
        return tuple(found)

    def primary(self) -> Tree:
        kind, text = self.tokens[self.at]
        if text == "(":
            self.take()
            inner = self.expression()
            self.take(")")
            return inner
        if text == "[":
            return ("list", self.arguments("]"))
        if text == "{":
            self.take()
            pairs = []
            while self.peek() != "}":
                key = self.expression()
                self.take(":")
                pairs.append((key, self.expression()))
                if self.peek() == ",":
                    self.take()
            self.take("}")
            return ("map", tuple(pairs))
        self.take()
        if kind in ("string", "number") or text in ("true", "false", "null"):
            return ("lit", text)
        if kind == "name" and self.peek() == "(":
            return ("call", text, self.arguments(")"))
        if kind == "name":
            return ("ident", text)
        raise ValueError(f"unexpected {text!r}")


def parse(text: str) -> Tree:
    parser = _Parser(text)
    tree = parser.expression()
    parser.take("")
    return tree


def _rank(tree: Tree) -> int:
    if tree[0] == "cond":
        return COND
    if tree[0] == "binary":
        return _BINARY[tree[1]]
    return UNARY if tree[0] == "unary" else MEMBER


def _at_least(tree: Tree, rank: int) -> str:
    text = render(tree)
    return text if _rank(tree) >= rank else f"({text})"


def render(tree: Tree) -> str:
    kind = tree[0]
    if kind in ("ident", "lit"):
        return str(tree[1])
    if kind == "select":
        return f"{_at_least(tree[1], MEMBER)}.{tree[2]}"
    if kind == "index":
        return f"{_at_least(tree[1], MEMBER)}[{render(tree[2])}]"
    if kind == "call":
        return f"{tree[1]}({', '.join(render(a) for a in tree[2])})"
    if kind == "method":
        return f"{_at_least(tree[1], MEMBER)}.{tree[2]}({', '.join(render(a) for a in tree[3])})"
    if kind == "list":
        return f"[{', '.join(render(a) for a in tree[1])}]"
    if kind == "map":
        return "{" + ", ".join(f"{render(k)}: {render(v)}" for k, v in tree[1]) + "}"
    if kind == "unary":
        return f"{tree[1]}{_at_least(tree[2], UNARY)}"
    if kind == "binary":
        rank = _BINARY[tree[1]]
        return f"{_at_least(tree[2], rank)} {tree[1]} {_at_least(tree[3], rank + 1)}"
    test, then, otherwise = tree[1:]
    return f"{_at_least(test, 1)} ? {_at_least(then, 1)} : {render(otherwise)}"
