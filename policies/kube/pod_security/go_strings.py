"""The few Go formatting idioms upstream's messages are built with, reproduced byte for byte:
``%q`` (strconv.Quote), ``joinQuote``, ``pluralize`` and the byte order of ``sets.List``."""
from __future__ import annotations

from collections.abc import Iterable

_NAMED_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
                  '"': '\\"', "\\": "\\\\"}


def _quoted_rune(char: str) -> str:
    escaped = _NAMED_ESCAPES.get(char)
    if escaped is not None:
        return escaped
    if char.isprintable():      # Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols, ' '
        return char
    code = ord(char)
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    if 0xD800 <= code <= 0xDFFF:    # a lone surrogate: Go's JSON decoder made it U+FFFD, which prints
        return "\ufffd"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def go_quote(text: str) -> str:
    """``fmt.Sprintf("%q", text)`` for a Go string."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return '"' + "".join(_quoted_rune(char) for char in text) + '"'


def join_quote(items: Iterable[str]) -> str:
    """Upstream's ``joinQuote``: ``"a", "b"``, with nothing escaped; empty for no items."""
    items = list(items)
    return '"' + '", "'.join(items) + '"' if items else ""


def pluralize(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def sorted_set(items: Iterable[str]) -> list[str]:
    """``sets.NewString(items...).List()``: distinct, in byte order (code point order is UTF-8's byte
    order for the strings a JSON decoder yields)."""
    return sorted(set(items))


def named(singular: str, plural: str, names: list[str]) -> str:
    """Upstream's ``"%s %s", pluralize(...), joinQuote(names)``: ``container "a"``,
    ``volumes "x", "y"``."""
    return f"{pluralize(singular, plural, len(names))} {join_quote(names)}"
