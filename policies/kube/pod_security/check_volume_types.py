"""The volume checks: ``hostPathVolumes`` (baseline, 1.0+) forbids hostPath volumes;
``restrictedVolumes`` (restricted, 1.0+, in place of hostPathVolumes) allows only the listed inline
volume sources."""
from __future__ import annotations

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix
from policies.kube.pod_security.go_strings import go_quote, named, pluralize, sorted_set
from policies.kube.pod_security.level_versions import BASELINE, RESTRICTED
from policies.kube.pod_security.pod_fields import PodView

HOST_PATH_VOLUMES_ID = "hostPathVolumes"
RESTRICTED_VOLUMES_ID = "restrictedVolumes"
ALLOWED_SOURCES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
                   "projected", "secret")
# In upstream's order: a volume that (against API validation) sets several is named by the first.
RESTRICTED_SOURCES = ("hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi", "glusterfs",
                      "rbd", "flexVolume", "cinder", "cephfs", "flocker", "fc", "azureFile", "vsphereVolume",
                      "quobyte", "azureDisk", "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos")
_ALLOWED_TEXT = ", ".join(ALLOWED_SOURCES)
_ALLOWED_SET = frozenset(ALLOWED_SOURCES)


def host_path_volumes_1_0(pod: PodView) -> CheckResult | None:
    bad = [volume for volume in pod.volumes if isinstance(volume.fields.get("hostPath"), dict)]
    if not bad:
        return None
    return CheckResult(
        HOST_PATH_VOLUMES_ID, "hostPath volumes", named("volume", "volumes", [volume.name for volume in bad]),
        tuple(Fix(None, f"spec.volumes[{volume.index}].hostPath", "no hostPath volume",
                  f"replace the hostPath of volume {go_quote(volume.name)} with another source, e.g. emptyDir, a "
                  "persistentVolumeClaim or a configMap") for volume in bad))


def restricted_volumes_1_0(pod: PodView) -> CheckResult | None:
    bad_names: list[str] = []
    bad_types: list[str] = []
    fixes: list[Fix] = []
    for volume in pod.volumes:
        fields = volume.fields
        if any(isinstance(fields.get(source), dict) for source in _ALLOWED_SET.intersection(fields)):
            continue
        source = next((source for source in RESTRICTED_SOURCES if isinstance(fields.get(source), dict)), None)
        if source is None and pod.pod_defaults:
            continue    # no source at all: the API server has defaulted it to an emptyDir
        bad_names.append(volume.name)
        bad_types.append(source or "unknown")
        fixes.append(Fix(None, f"spec.volumes[{volume.index}]" + (f".{source}" if source else ""), _ALLOWED_TEXT,
                         f"replace the {source or 'source'} of volume {go_quote(volume.name)} with one of {_ALLOWED_TEXT}"))
    if not bad_names:
        return None
    types = sorted_set(bad_types)
    return CheckResult(
        RESTRICTED_VOLUMES_ID, "restricted volume types",
        f"{named('volume', 'volumes', bad_names)} {pluralize('uses', 'use', len(bad_names))} "
        f"{named('restricted volume type', 'restricted volume types', types)}", tuple(fixes))


HOST_PATH_CHECK = Check(HOST_PATH_VOLUMES_ID, BASELINE, (VersionedCheck((1, 0), host_path_volumes_1_0),))
RESTRICTED_CHECK = Check(RESTRICTED_VOLUMES_ID, RESTRICTED, (
    VersionedCheck((1, 0), restricted_volumes_1_0, (HOST_PATH_VOLUMES_ID,)),))
