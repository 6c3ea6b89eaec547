"""The CEL functions a ValidatingAdmissionPolicy may call on Kubernetes 1.29–1.36, declared as
the API server declares them: member (``x.f(y)``) or global (``f(x, y)``), the argument types
(a member overload's receiver first), the result, and the first version whose base CEL
environment has it (k8s.io/apiserver/pkg/cel/environment/base.go).

Taken from the declarations themselves, not the doc comments (quantity.go documents
``q.sign()``; it declares ``sign(q)``): the Kubernetes libraries in
k8s.io/apiserver/pkg/cel/library (quantity.go, lists.go, regex.go, urls.go), cel-go's standard
library, and cel-go's ``ext.Strings`` at version 2 (the API server's from 1.29). A function not
here is refused by ``cel_type_check``: the libraries not used by the export (ip, cidr, format,
semver, image, authz, sets) are left out on purpose, and ``mul``, ``div``, ``divInt`` (quantity)
and ``includes`` (lists) too: upstream has not assigned them a Kubernetes version yet.

Types are written as text: ``int uint double bool string bytes null type dyn``,
``kubernetes.Quantity``, ``kubernetes.URL``, ``list(T)``, ``map(K, V)`` and type parameters
``A``, ``K``, ``V``.
"""
from __future__ import annotations

from dataclasses import dataclass

OLDEST, NEWEST = (1, 29), (1, 36)  # the versions the export supports


@dataclass(frozen=True)
class Overload:
    function: str
    member: bool
    arguments: tuple[str, ...]  # a member overload's receiver first
    result: str
    since: tuple[int, int]
    library: str


def _declare(library: str, since: tuple[int, int], rows: str) -> list[Overload]:
    """One overload a line: ``name member|global arg, arg -> result``."""
    found = []
    for row in rows.strip().splitlines():
        head, result = row.split("->")
        name, style, *rest = head.split(None, 2)
        arguments = tuple(a.strip() for a in _split_top(rest[0])) if rest else ()
        found.append(Overload(name, style == "member", arguments, result.strip(), since, library))
    return found


def _split_top(text: str) -> list[str]:
    """``list(A), map(K, V)`` → the two, at the commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current] if current.strip() else parts


_CONVERTIBLE = ("int", "uint", "double", "string", "bytes", "bool")
_COMPARABLE = ("int", "uint", "double", "bool", "duration", "timestamp", "string", "bytes")
_SUMMABLE = ("int", "uint", "double", "duration")

STANDARD = _declare("cel", (1, 0), """
size global string -> int
size global bytes -> int
size global list(A) -> int
size global map(K, V) -> int
size member string -> int
size member bytes -> int
size member list(A) -> int
size member map(K, V) -> int
contains member string, string -> bool
startsWith member string, string -> bool
endsWith member string, string -> bool
matches global string, string -> bool
matches member string, string -> bool
dyn global A -> dyn
type global A -> type
int global int -> int
int global uint -> int
int global double -> int
int global string -> int
int global timestamp -> int
uint global int -> uint
uint global uint -> uint
uint global double -> uint
uint global string -> uint
double global int -> double
double global uint -> double
double global double -> double
double global string -> double
string global int -> string
string global uint -> string
string global double -> string
string global string -> string
string global bytes -> string
string global bool -> string
string global timestamp -> string
string global duration -> string
bool global bool -> bool
bool global string -> bool
bytes global bytes -> bytes
bytes global string -> bytes
duration global string -> duration
timestamp global string -> timestamp
""")

STRINGS = _declare("cel-go ext.Strings v2", (1, 29), """
charAt member string, int -> string
indexOf member string, string -> int
indexOf member string, string, int -> int
lastIndexOf member string, string -> int
lastIndexOf member string, string, int -> int
lowerAscii member string -> string
upperAscii member string -> string
replace member string, string, string -> string
replace member string, string, string, int -> string
split member string, string -> list(string)
split member string, string, int -> list(string)
substring member string, int -> string
substring member string, int, int -> string
trim member string -> string
join member list(string) -> string
join member list(string), string -> string
format member string, list(dyn) -> string
strings.quote global string -> string
""")

LISTS = _declare("kubernetes.lists", (1, 24), "\n".join(
    [f"isSorted member list({t}) -> bool" for t in _COMPARABLE]
    + [f"{f} member list({t}) -> {t}" for f in ("max", "min") for t in _COMPARABLE]
    + [f"sum member list({t}) -> {t}" for t in _SUMMABLE]
    + ["indexOf member list(A), A -> int", "lastIndexOf member list(A), A -> int"]))

REGEX = _declare("kubernetes.regex", (1, 24), """
find member string, string -> string
findAll member string, string -> list(string)
findAll member string, string, int -> list(string)
""")

URLS = _declare("kubernetes.urls", (1, 24), """
url global string -> kubernetes.URL
isURL global string -> bool
getScheme member kubernetes.URL -> string
getHost member kubernetes.URL -> string
getHostname member kubernetes.URL -> string
getPort member kubernetes.URL -> string
getEscapedPath member kubernetes.URL -> string
getQuery member kubernetes.URL -> map(string, list(string))
""")

QUANTITY = _declare("kubernetes.quantity", (1, 28), """
quantity global string -> kubernetes.Quantity
isQuantity global string -> bool
sign global kubernetes.Quantity -> int
isGreaterThan member kubernetes.Quantity, kubernetes.Quantity -> bool
isLessThan member kubernetes.Quantity, kubernetes.Quantity -> bool
compareTo member kubernetes.Quantity, kubernetes.Quantity -> int
asApproximateFloat member kubernetes.Quantity -> double
asInteger member kubernetes.Quantity -> int
isInteger member kubernetes.Quantity -> bool
add member kubernetes.Quantity, kubernetes.Quantity -> kubernetes.Quantity
add member kubernetes.Quantity, int -> kubernetes.Quantity
sub member kubernetes.Quantity, kubernetes.Quantity -> kubernetes.Quantity
sub member kubernetes.Quantity, int -> kubernetes.Quantity
""")

FUNCTIONS: tuple[Overload, ...] = (*STANDARD, *STRINGS, *LISTS, *REGEX, *URLS, *QUANTITY)
# Checked by the operators' own rules in type_check, not by name: they are not callable.
MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter"})


def overloads(function: str, *, member: bool) -> list[Overload]:
    return [o for o in FUNCTIONS if o.function == function and o.member == member]


def in_every_supported_version(overload: Overload) -> bool:
    return overload.since <= OLDEST
