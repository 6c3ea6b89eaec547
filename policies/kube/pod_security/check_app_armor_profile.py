"""``appArmorProfile`` (baseline, 1.0+): an AppArmor profile, set in a securityContext or in the
deprecated per-container annotation, may only be the runtime's default or a localhost profile."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix, for_the_pod
from policies.kube.pod_security.go_strings import go_quote, join_quote, named, pluralize, sorted_set
from policies.kube.pod_security.level_versions import BASELINE
from policies.kube.pod_security.pod_fields import ContainerView, PodView, as_mapping, as_string

CHECK_ID = "appArmorProfile"
ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
_ALLOWED_TYPES = frozenset({"RuntimeDefault", "Localhost"})
_TYPE_ALLOWED = '"RuntimeDefault" or "Localhost", or unset'
_TYPE_WRITE = "set securityContext.appArmorProfile.type: RuntimeDefault (or Localhost with its localhostProfile)"


def _allowed_annotation(value: str) -> bool:
    return value == "" or value == "runtime/default" or value.startswith("localhost/")


def _bad_type(context: Mapping[str, Any] | None) -> str | None:
    """The profile type a securityContext sets when it is not allowed; None when it is."""
    if context is None:
        return None
    profile = context.get("appArmorProfile")
    if not isinstance(profile, dict):
        return None
    profile_type = as_string(as_mapping(profile).get("type"))
    return None if profile_type in _ALLOWED_TYPES else profile_type


def _unconfined_by_annotation(pod: PodView, container: ContainerView) -> bool:
    """The API server's applyAppArmorVersionSkew (1.30+), before admission: a non-Windows pod's
    container without a profile of its own gets the one its deprecated annotation names, unless
    that is the pod's. Only "unconfined" becomes a forbidden type."""
    if pod.windows or pod.annotations.get(ANNOTATION_PREFIX + container.name) != "unconfined":
        return False
    if isinstance(container.context_field("appArmorProfile"), dict):
        return False
    pod_profile = pod.pod_context_field("appArmorProfile")
    return not (isinstance(pod_profile, dict) and pod_profile.get("type") == "Unconfined"
                and pod_profile.get("localhostProfile") is None)


def app_armor_profile_1_0(pod: PodView) -> CheckResult | None:
    setters: list[str] = []
    bad_values: list[str] = []
    fixes: list[Fix] = []
    pod_type = _bad_type(pod.security_context)
    if pod_type is not None:
        setters.append("pod")
        bad_values.append(pod_type)
        fixes.append(Fix(None, "spec.securityContext.appArmorProfile.type", _TYPE_ALLOWED, for_the_pod(_TYPE_WRITE)))
    bad_containers = []
    for container in pod.containers:
        container_type = _bad_type(container.security_context)
        if container_type is None and pod.pod_defaults and _unconfined_by_annotation(pod, container):
            bad_containers.append(container.name)
            bad_values.append("Unconfined")
            continue    # the annotation's own fix says what to change
        if container_type is not None:
            bad_containers.append(container.name)
            bad_values.append(container_type)
            fixes.append(Fix(container.name, f"{container.path}.securityContext.appArmorProfile.type", _TYPE_ALLOWED,
                             _TYPE_WRITE))
    if bad_containers:
        setters.append(named("container", "containers", bad_containers))
    # Sorted as upstream sorts them: by the whole "key=\"value\"" text.
    annotations = [] if not pod.annotations else sorted((f"{key}={go_quote(value)}", key) for key, value in pod.annotations.items()
                         if key.startswith(ANNOTATION_PREFIX) and not _allowed_annotation(value))
    if not (bad_values or annotations):
        return None
    value_list = sorted_set(bad_values)
    if annotations:
        value_list.extend(text for text, _ in annotations)
        setters.append(pluralize("annotation", "annotations", len(annotations)))
        fixes.extend(Fix(key[len(ANNOTATION_PREFIX):], f"metadata.annotations[{key}]",
                         '"runtime/default", "localhost/<profile>", or empty',
                         f"remove the annotation {key} and set securityContext.appArmorProfile.type: RuntimeDefault")
                     for _, key in annotations)
    if not setters:
        return None
    return CheckResult(
        CHECK_ID, pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", len(value_list)),
        f"{' and '.join(setters)} must not set AppArmor profile type to {join_quote(value_list)}", tuple(fixes))


CHECK = Check(CHECK_ID, BASELINE, (VersionedCheck((1, 0), app_armor_profile_1_0),))
