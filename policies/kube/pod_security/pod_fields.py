"""A pod's metadata and spec as the checks read them, from decoded JSON of any shape.

Upstream reads typed Go structs. A field of the wrong type would have failed the API server's
decoding of the whole pod; here such a field reads as absent, so no shape of input raises. ``null``
reads as absent, as Go decodes it to a nil pointer."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_EMPTY: Mapping[str, Any] = {}
# Upstream's visitContainers order: init containers, containers, ephemeral containers.
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def as_mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def as_list(value: object) -> list[Any] | tuple[Any, ...]:
    return value if isinstance(value, (list, tuple)) else ()


def as_string(value: object) -> str:
    """A Go string field: "" when unset (or not a string)."""
    return value if isinstance(value, str) else ""


def is_object(value: object) -> bool:
    """A Go struct pointer that is set: ``hostPath: {}`` is set, ``hostPath: null`` is not."""
    return isinstance(value, Mapping)


def is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class ContainerView:
    """One container, with the path of its entry in the pod spec (``spec.initContainers[1]``)."""
    __slots__ = ("name", "path", "fields", "security_context")

    def __init__(self, name: str, path: str, fields: Mapping[str, Any]) -> None:
        self.name = name
        self.path = path
        self.fields = fields
        context = fields.get("securityContext")
        # None when unset: several checks treat an unset securityContext apart from an empty one.
        self.security_context: Mapping[str, Any] | None = context if isinstance(context, Mapping) else None

    def context_field(self, key: str) -> Any:
        return None if self.security_context is None else self.security_context.get(key)


class PodView:
    """What the checks read of one pod, gathered once per evaluation."""
    __slots__ = ("annotations", "spec", "security_context", "containers")

    def __init__(self, metadata: object, spec: object) -> None:
        annotations = as_mapping(as_mapping(metadata).get("annotations"))
        self.annotations: Mapping[str, str] = {
            key: value for key, value in annotations.items() if isinstance(key, str) and isinstance(value, str)}
        self.spec = as_mapping(spec)
        context = self.spec.get("securityContext")
        self.security_context: Mapping[str, Any] | None = context if isinstance(context, Mapping) else None
        self.containers = [
            ContainerView(as_string(container.get("name")), f"spec.{kind}[{index}]", container)
            for kind in CONTAINER_LISTS
            for index, container in enumerate(as_list(self.spec.get(kind)))
            if isinstance(container, Mapping)
        ]

    def pod_context_field(self, key: str) -> Any:
        return None if self.security_context is None else self.security_context.get(key)

    def is_windows(self) -> bool:
        """``spec.os.name: windows``: the checks that Windows pods cannot fail exempt them (1.25+)."""
        return as_mapping(self.spec.get("os")).get("name") == "windows"

    def in_user_namespace(self) -> bool:
        """``spec.hostUsers: false`` (upstream's relaxPolicyForUserNamespacePod)."""
        return self.spec.get("hostUsers") is False
