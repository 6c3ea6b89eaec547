"""A pod's metadata and spec as the checks read them, from decoded JSON of any shape.

PodSecurity admission sees a pod after the API server has defaulted it (``SetDefaults_Pod``,
``SetDefaults_Volume``). Two of those defaults change a verdict, and a PodView says where they
apply: a volume without any source is an emptyDir, and with ``hostNetwork: true`` a port of a
container or init container without a hostPort has its containerPort as hostPort.

Upstream reads typed Go structs. A field of the wrong type would have failed the API server's
decoding of the whole pod; here such a field reads as absent, so no shape of input raises. ``null``
reads as absent, as Go decodes it to a nil pointer."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_EMPTY: Mapping[str, Any] = {}
# Every source of a core/v1 VolumeSource.
VOLUME_SOURCES = (
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
    "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "projected",
    "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image")
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
    __slots__ = ("name", "kind", "path", "fields", "security_context")

    def __init__(self, name: str, kind: str, index: int, fields: Mapping[str, Any]) -> None:
        self.name = name
        self.kind = kind    # "initContainers", "containers" or "ephemeralContainers"
        self.path = f"spec.{kind}[{index}]"
        self.fields = fields
        context = fields.get("securityContext")
        # None when unset: several checks treat an unset securityContext apart from an empty one.
        self.security_context: Mapping[str, Any] | None = context if isinstance(context, Mapping) else None

    def context_field(self, key: str) -> Any:
        return None if self.security_context is None else self.security_context.get(key)


class VolumeView:
    """One volume of ``spec.volumes``, with its index."""
    __slots__ = ("index", "name", "fields", "empty_dir_by_default")

    def __init__(self, index: int, fields: Mapping[str, Any], pod_defaults: bool) -> None:
        self.index = index
        self.name = as_string(fields.get("name"))
        self.fields = fields
        # SetDefaults_Volume: a volume that sets no source at all is an emptyDir.
        self.empty_dir_by_default = pod_defaults and not any(is_object(fields.get(source)) for source in VOLUME_SOURCES)


class PodView:
    """What the checks read of one pod, gathered once per evaluation."""
    __slots__ = ("annotations", "spec", "security_context", "containers", "volumes", "host_network_ports")

    def __init__(self, metadata: object, spec: object, *, pod_defaults: bool = True) -> None:
        """``pod_defaults``: read the pod as the API server has defaulted it (False: as written, the
        way upstream's unit tests call a check)."""
        annotations = as_mapping(as_mapping(metadata).get("annotations"))
        self.annotations: Mapping[str, str] = {
            key: value for key, value in annotations.items() if isinstance(key, str) and isinstance(value, str)}
        self.spec = as_mapping(spec)
        context = self.spec.get("securityContext")
        self.security_context: Mapping[str, Any] | None = context if isinstance(context, Mapping) else None
        self.containers = [
            ContainerView(as_string(container.get("name")), kind, index, container)
            for kind in CONTAINER_LISTS
            for index, container in enumerate(as_list(self.spec.get(kind)))
            if isinstance(container, Mapping)
        ]
        self.volumes = [VolumeView(index, volume, pod_defaults)
                        for index, volume in enumerate(as_list(self.spec.get("volumes"))) if isinstance(volume, Mapping)]
        # SetDefaults_Pod: with hostNetwork, every port of a container or init container without a
        # hostPort gets its containerPort as hostPort.
        self.host_network_ports = pod_defaults and self.spec.get("hostNetwork") is True

    def pod_context_field(self, key: str) -> Any:
        return None if self.security_context is None else self.security_context.get(key)

    def is_windows(self) -> bool:
        """``spec.os.name: windows``: the checks that Windows pods cannot fail exempt them (1.25+)."""
        return as_mapping(self.spec.get("os")).get("name") == "windows"

    def in_user_namespace(self) -> bool:
        """``spec.hostUsers: false`` (upstream's relaxPolicyForUserNamespacePod)."""
        return self.spec.get("hostUsers") is False
