"""Container image references, parsed by the grammar the container runtimes use
(``distribution/reference``), with the reason in words when one does not parse.

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [ host [ ":" port ] "/" ] path-component [ "/" path-component ]*
    path-comp. := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
    tag        := [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
    digest     := "sha256:" 64 hex | "sha384:" 96 hex | "sha512:" 128 hex   (lowercase)

One deliberate difference: the runtimes take a first component with capitals (``MyOrg/app``) for
a registry host named ``MyOrg``; here, as for every name without ``.``, ``:`` or ``localhost``, it
is part of the repository, so the user hears that repositories are lowercase instead of getting
a pull error from a host that does not exist.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

NAME_MAX = 255
TAG_MAX = 128
DEFAULT_DOMAIN = "docker.io"
OFFICIAL_PREFIX = "library/"
DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
EXAMPLE = "quay.io/org/app:1.0"

_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_DOMAIN_COMPONENT = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?")
_IPV6_DOMAIN = re.compile(r"\[[0-9a-fA-F:.]+\](?::[0-9]+)?")
_TAG = re.compile(r"\w[\w.-]*", re.ASCII)
_HEX = re.compile(r"[0-9a-f]+")


class BadImageReference(ValueError):
    """``str(error)`` says what is wrong; ``fix`` what to write instead, when it can be told."""

    def __init__(self, reason: str, fix: str = "") -> None:
        super().__init__(reason)
        self.fix = fix


@dataclass(frozen=True)
class ParsedImage:
    domain: str  # lowercase; docker.io when the reference names none
    path: str  # library/<name> for Docker Hub's official images
    tag: str | None
    digest: str | None

    def same_image(self, other: ParsedImage) -> bool:
        """Whether both certainly run the same bits: equal digests, or equal names and tags
        without digests (a tag may move, but both pods then pull from the same tag)."""
        if self.digest or other.digest:
            return self.digest == other.digest
        return (self.domain, self.path, self.tag or "latest") == (other.domain, other.path, other.tag or "latest")

    def short(self, digest_chars: int = 12) -> str:
        """The familiar form people type, the digest abbreviated: ``mpi-pi:openmpi@sha256:0a1b2c…``."""
        path = self.path
        if self.domain == DEFAULT_DOMAIN and path.startswith(OFFICIAL_PREFIX) and path.count("/") == 1:
            path = path[len(OFFICIAL_PREFIX):]
        text = path if self.domain == DEFAULT_DOMAIN else f"{self.domain}/{path}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            algorithm, _, hex_digits = self.digest.partition(":")
            text += f"@{algorithm}:{hex_digits[:digest_chars]}…"
        return text


# The same few images come back in request after request; a ParsedImage is immutable.
@lru_cache(maxsize=1024)
def parse_image(reference: str) -> ParsedImage:
    if reference == "":
        raise BadImageReference("it is empty")
    if any(c.isspace() for c in reference):
        raise BadImageReference("it contains whitespace")
    if "://" in reference:
        scheme = reference.split("://", 1)[0]
        raise BadImageReference(f'it has a URL scheme ("{scheme}://")',
                                f'drop it: a reference starts with the registry host, e.g. "{EXAMPLE}"')
    name_and_tag, has_digest, digest = reference.partition("@")
    if has_digest:
        _check_digest(digest)
    name, tag = _split_tag(name_and_tag)
    if not name:
        raise BadImageReference("it has no repository name before the tag or digest")
    if len(name) > NAME_MAX:
        raise BadImageReference(f"the repository name is {len(name)} characters, over the {NAME_MAX} allowed")
    domain, path = _split_domain(name)
    if domain is not None:
        _check_domain(domain)
    if path != path.lower() and _valid_path(path.lower()):
        fixed = (f"{domain}/" if domain else "") + path.lower() + reference[len(name):]
        raise BadImageReference(f'the repository "{path}" must be lowercase', f'use "{fixed}"')
    _check_path(path)
    if domain is None or domain.lower() == "index.docker.io":
        domain = DEFAULT_DOMAIN
        if "/" not in path:
            path = OFFICIAL_PREFIX + path
    return ParsedImage(domain.lower(), path, tag, digest if has_digest else None)


def _split_tag(name_and_tag: str) -> tuple[str, str | None]:
    colon = name_and_tag.rfind(":")
    if colon <= name_and_tag.rfind("/"):  # a ':' before the last '/' is a registry port
        return name_and_tag, None
    name, tag = name_and_tag[:colon], name_and_tag[colon + 1:]
    if tag == "":
        raise BadImageReference("it ends in ':' with no tag after it", "add the tag or remove the ':'")
    if len(tag) > TAG_MAX:
        raise BadImageReference(f"the tag is {len(tag)} characters, over the {TAG_MAX} allowed")
    if not _TAG.fullmatch(tag):
        raise BadImageReference(f'the tag "{tag}" may only use letters, digits, "_", "." and "-", '
                                'and may not start with "." or "-"')
    return name, tag


def _check_digest(digest: str) -> None:
    if "@" in digest:
        raise BadImageReference('it has more than one "@"; write name[:tag]@sha256:<64 hex digits>')
    algorithm, colon, hex_digits = digest.partition(":")
    expected = DIGEST_HEX_LENGTHS.get(algorithm)
    if not colon or expected is None:
        raise BadImageReference(f'the digest "{digest}" must be "sha256:" followed by 64 hex digits')
    if not _HEX.fullmatch(hex_digits) or len(hex_digits) != expected:
        raise BadImageReference(f"the {algorithm} digest must be {expected} lowercase hex digits "
                                f"(it has {len(hex_digits)} characters{_non_hex(hex_digits)})")


def _non_hex(hex_digits: str) -> str:
    bad = sorted({c for c in hex_digits if c not in "0123456789abcdef"})
    return f", including {', '.join(repr(c) for c in bad[:5])}" if bad else ""


def _split_domain(name: str) -> tuple[str | None, str]:
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return None, name


def _check_domain(domain: str) -> None:
    if domain.startswith("["):
        if not _IPV6_DOMAIN.fullmatch(domain):
            raise BadImageReference(f'the registry "{domain}" is not a valid [IPv6 address]:port')
        return
    host, colon, port = domain.partition(":")
    if colon and not port.isdigit():
        raise BadImageReference(f'the registry port in "{domain}" must be a number')
    if not all(_DOMAIN_COMPONENT.fullmatch(part) for part in host.split(".")):
        raise BadImageReference(f'the registry host "{host}" is not a valid host name '
                                '(letters, digits and "-" between dots)')


def _valid_path(path: str) -> bool:
    return all(_PATH_COMPONENT.fullmatch(component) for component in path.split("/"))


def _check_path(path: str) -> None:
    components = path.split("/")
    if "" in components:
        raise BadImageReference(f'the repository "{path}" has an empty component ("//", or a "/" at '
                                'the start or end)')
    for component in components:
        if not _PATH_COMPONENT.fullmatch(component):
            raise BadImageReference(
                f'"{component}" is not a valid repository component: lowercase letters and digits, '
                'separated by single ".", "_" or "__" or by dashes, not at the start or end')
