"""A pod's metadata and spec as the checks read them, from decoded JSON of any shape.

PodSecurity admission sees a pod after the API server has defaulted and prepared it
(``SetDefaults_Pod``, ``SetDefaults_Volume``, the pod strategy's ``applyAppArmorVersionSkew``). Three
of those steps change a verdict, and the checks apply them where ``pod_defaults`` is set: a volume
without any source is an emptyDir; with ``hostNetwork: true`` a port of a container or init
container without a hostPort has its containerPort as hostPort; a container without an AppArmor
profile takes the one its deprecated annotation names (check_app_armor_profile.py).

Upstream reads typed Go structs. A field of the wrong type would have failed the API server's
decoding of the whole pod; here such a field reads as absent, so no shape of input raises. ``null``
reads as absent, as Go decodes it to a nil pointer. Below the top, maps are the ``dict`` a JSON
decoder makes (and its subclasses): ``isinstance(x, dict)`` is many times faster than asking
``Mapping``, and this runs for every pod template of every request."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_EMPTY: dict[str, Any] = {}
# Upstream's visitContainers order: init containers, containers, ephemeral containers.
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def as_mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else _EMPTY


def as_list(value: object) -> list[Any] | tuple[Any, ...]:
    return value if isinstance(value, (list, tuple)) else ()


def as_string(value: object) -> str:
    """A Go string field: "" when unset (or not a string)."""
    return value if isinstance(value, str) else ""


def is_object(value: object) -> bool:
    """A Go struct pointer that is set: ``hostPath: {}`` is set, ``hostPath: null`` is not."""
    return isinstance(value, dict)


def is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _top(value: object) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    return dict(value) if isinstance(value, Mapping) else _EMPTY


class ContainerView:
    """One container, with the path of its entry in the pod spec (``spec.initContainers[1]``)."""
    __slots__ = ("name", "kind", "index", "fields", "security_context")

    def __init__(self, name: str, kind: str, index: int, fields: dict[str, Any]) -> None:
        self.name = name
        self.kind = kind    # "initContainers", "containers" or "ephemeralContainers"
        self.index = index
        self.fields = fields
        context = fields.get("securityContext")
        # None when unset: several checks treat an unset securityContext apart from an empty one.
        self.security_context: dict[str, Any] | None = context if isinstance(context, dict) else None

    @property
    def path(self) -> str:
        """Only a failure needs it, so it is not made for every container of every pod."""
        return f"spec.{self.kind}[{self.index}]"

    def context_field(self, key: str) -> Any:
        return None if self.security_context is None else self.security_context.get(key)


class VolumeView:
    """One volume of ``spec.volumes``, with its index."""
    __slots__ = ("index", "name", "fields")

    def __init__(self, index: int, fields: dict[str, Any]) -> None:
        self.index = index
        self.name = as_string(fields.get("name"))
        self.fields = fields


class PodView:
    """What the checks read of one pod, gathered once per evaluation."""
    __slots__ = ("annotations", "spec", "security_context", "containers", "volumes", "pod_defaults", "windows",
                 "host_network_ports")

    def __init__(self, metadata: object, spec: object, *, pod_defaults: bool = True) -> None:
        """``pod_defaults``: read the pod as the API server has defaulted it (False: as written, the
        way upstream's unit tests call a check)."""
        annotations = as_mapping(_top(metadata).get("annotations"))
        self.annotations: dict[str, str] = {
            key: value for key, value in annotations.items() if isinstance(key, str) and isinstance(value, str)}
        self.spec = spec = _top(spec)
        context = spec.get("securityContext")
        self.security_context: dict[str, Any] | None = context if isinstance(context, dict) else None
        self.containers = [
            ContainerView(as_string(container.get("name")), kind, index, container)
            for kind in CONTAINER_LISTS
            for index, container in enumerate(as_list(spec.get(kind)))
            if isinstance(container, dict)
        ]
        self.volumes = [VolumeView(index, volume)
                        for index, volume in enumerate(as_list(spec.get("volumes"))) if isinstance(volume, dict)]
        # SetDefaults_Volume: a volume that sets no source at all is an emptyDir.
        self.pod_defaults = pod_defaults
        # ``spec.os.name: windows``: the checks Windows pods cannot fail exempt them (1.25+).
        self.windows = as_mapping(spec.get("os")).get("name") == "windows"
        # SetDefaults_Pod: with hostNetwork, every port of a container or init container without a
        # hostPort gets its containerPort as hostPort.
        self.host_network_ports = pod_defaults and spec.get("hostNetwork") is True

    def pod_context_field(self, key: str) -> Any:
        return None if self.security_context is None else self.security_context.get(key)

    def is_windows(self) -> bool:
        return self.windows

    def in_user_namespace(self) -> bool:
        """``spec.hostUsers: false`` (upstream's relaxPolicyForUserNamespacePod)."""
        return self.spec.get("hostUsers") is False
