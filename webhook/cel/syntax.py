"""The syntax tree of a CEL expression, small and plain: cel-python's parse tree (lark) with
the grammar's one-child wrappers dropped. Read by the type checker (``cel_type_check``) and the
tests' schema reads."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import lark

from webhook.cel.cel_runtime import compile_expression

LITERAL_TYPES = {"STRING_LIT": "string", "MLSTRING_LIT": "string", "INT_LIT": "integer", "UINT_LIT": "integer",
                 "FLOAT_LIT": "number", "BOOL_LIT": "boolean", "NULL_LIT": "null", "BYTES_LIT": "bytes"}


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: trees are parsed once
class Node:
    kind: str  # ident lit select index call method and or not neg cond rel arith list map
    children: tuple[Node, ...] = ()
    value: Any = None  # the name, field, operator, or (type, value) of a literal


@lru_cache(maxsize=None)
def parse(expression: str) -> Node:
    return _convert(compile_expression(expression))


def _convert(tree: Any) -> Node:
    data, kids = str(tree.data), [c for c in tree.children if c is not None]
    if data in ("expr", "conditionalor", "conditionaland") and len(kids) == 1:
        return _convert(kids[0])
    if data == "expr":
        return Node("cond", tuple(_convert(k) for k in kids))
    if data in ("conditionalor", "conditionaland"):
        return Node("or" if data == "conditionalor" else "and", (_convert(kids[0]), _convert(kids[1])))
    if data in ("relation", "addition", "multiplication"):
        if len(kids) == 1:
            return _convert(kids[0])
        operator, right = kids
        kind = "rel" if data == "relation" else "arith"
        return Node(kind, (_convert(operator.children[0]), _convert(right)), str(operator.data).split("_", 1)[1])
    if data == "unary":
        if len(kids) == 1:
            return _convert(kids[0])
        return Node("not" if str(kids[0].data) == "unary_not" else "neg", (_convert(kids[1]),))
    if data in ("member", "primary", "paren_expr"):
        return _convert(kids[0])
    if data == "member_dot":
        return Node("select", (_convert(kids[0]),), str(kids[1]))
    if data == "member_dot_arg":
        arguments = _list(kids[2]) if len(kids) > 2 else []
        return Node("method", (_convert(kids[0]), *arguments), str(kids[1]))
    if data == "member_index":
        return Node("index", (_convert(kids[0]), _convert(kids[1])))
    if data == "ident_arg":
        return Node("call", tuple(_list(kids[1])) if len(kids) > 1 else (), str(kids[0]))
    if data == "ident":
        return Node("ident", (), str(kids[0]))
    if data == "literal":
        token = kids[0]
        kind = LITERAL_TYPES[token.type]
        value = ast.literal_eval(str(token)) if kind == "string" and str(token)[:1] not in "rR" else str(token)
        return Node("lit", (), (kind, value, token.type))
    if data == "list_lit":
        return Node("list", tuple(_list(kids[0])) if kids else ())
    if data == "map_lit":
        return Node("map", tuple(_convert(k) for k in kids[0].children) if kids else ())
    raise ValueError(f"CEL syntax not modelled here: {data}")


def _list(exprlist: Any) -> list[Node]:
    return [_convert(c) for c in exprlist.children] if isinstance(exprlist, lark.Tree) else []
