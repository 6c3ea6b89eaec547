"""The ValidatingAdmissionPolicy overlays: vap-fallback (the policies beside the webhook) and
vap-webhook-ignore (the policies, and the validating webhook failing open). They build, every
object is valid Kubernetes for the versions that serve admissionregistration.k8s.io/v1
policies, and the generated policies are those the base policy file exports today."""
from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from policies.config.reader import parse_policy
from policies.vap import objects
from tests.manifests.build import MANIFESTS, Object, build, find, find_all
from webhook.commands.export import render_yaml

VAP_OVERLAYS = ("vap-fallback", "vap-webhook-ignore")
# ValidatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from Kubernetes 1.30.
KUBERNETES_VERSIONS = ("1.30", "1.36")
GENERATED = MANIFESTS / "components" / "vap" / "validating-admission-policies.yaml"
BASE_POLICY = MANIFESTS / "base" / "policy.yaml"


@pytest.fixture(scope="module")
def vap_overlays(prepared_manifests: Path) -> dict[str, list[Object]]:
    return {overlay: build(prepared_manifests, overlay) for overlay in VAP_OVERLAYS}


def exported_from_base_policy() -> list[dict]:
    return objects(parse_policy(BASE_POLICY.read_text(), own_namespace="mpijob-webhook"))


def test_the_generated_policies_are_those_the_base_policy_exports_today() -> None:
    """Regenerate with the command in manifests/components/vap/kustomization.yaml."""
    assert GENERATED.read_text() == render_yaml(exported_from_base_policy(), Path("policy.yaml"))


@pytest.mark.parametrize("overlay", VAP_OVERLAYS)
def test_the_overlay_holds_the_install_and_every_exported_policy(vap_overlays, overlay: str) -> None:
    built = vap_overlays[overlay]
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in built]
    assert len(keys) == len(set(keys))
    find(built, "Deployment", "mpijob-webhook")
    find(built, "MutatingWebhookConfiguration", "kubeflow-mpijob-webhook")
    policies = find_all(built, "ValidatingAdmissionPolicy") + find_all(built, "ValidatingAdmissionPolicyBinding")
    def by_name(found: list[Object]) -> list[Object]:
        return sorted(found, key=lambda o: (o["kind"], o["metadata"]["name"]))
    assert by_name(policies) == by_name(exported_from_base_policy())
    for policy in policies:
        assert "namespace" not in policy["metadata"]  # cluster-scoped


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", VAP_OVERLAYS)
def test_every_object_is_valid_kubernetes(vap_overlays, overlay: str, version: str) -> None:
    problems = []
    for obj in vap_overlays[overlay]:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
    assert problems == []


def _failure_policies(built: list[Object]) -> dict[str, str]:
    return {w["name"]: w["failurePolicy"]
            for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
            for config in find_all(built, kind) for w in config["webhooks"]}


def test_the_fallback_overlay_keeps_both_webhooks_failing_closed(vap_overlays) -> None:
    assert _failure_policies(vap_overlays["vap-fallback"]) == {
        "validate.mpijob-webhook.kubeflow.org": "Fail", "mutate.mpijob-webhook.kubeflow.org": "Fail"}


def test_the_ignore_overlay_lets_only_the_validating_webhook_fail_open(vap_overlays) -> None:
    assert _failure_policies(vap_overlays["vap-webhook-ignore"]) == {
        "validate.mpijob-webhook.kubeflow.org": "Ignore", "mutate.mpijob-webhook.kubeflow.org": "Fail"}
    # Nothing else differs from the fallback overlay.
    def without_webhooks(built: list[Object]) -> list[Object]:
        return [o for o in built if o["kind"] != "ValidatingWebhookConfiguration"]
    assert without_webhooks(vap_overlays["vap-webhook-ignore"]) == without_webhooks(vap_overlays["vap-fallback"])


def test_the_policies_match_what_the_webhook_matches(vap_overlays) -> None:
    """The same writes: kubeflow.org mpijobs and trainer.kubeflow.org trainjobs, CREATE and
    UPDATE, every served version through matchPolicy Equivalent, the webhook's own namespace and
    kube-system left alone."""
    built = vap_overlays["vap-fallback"]
    (webhook,) = find(built, "ValidatingWebhookConfiguration", "mpijob-webhook")["webhooks"]
    keys = ("apiGroups", "apiVersions", "operations", "resources")
    webhook_rules = [{k: r[k] for k in keys} for r in webhook["rules"]]
    matched = []
    for policy in find_all(built, "ValidatingAdmissionPolicy"):
        (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
        assert {k: rule[k] for k in keys} in webhook_rules
        matched.append({k: rule[k] for k in keys})
        assert policy["spec"]["matchConstraints"]["matchPolicy"] == webhook["matchPolicy"] == "Equivalent"
    assert all(r in matched for r in webhook_rules)  # every kind the webhook checks has its policies
    for binding in find_all(built, "ValidatingAdmissionPolicyBinding"):
        assert binding["spec"]["matchResources"]["namespaceSelector"] == webhook["namespaceSelector"]


def test_the_generated_file_is_yaml_an_admin_can_read() -> None:
    text = GENERATED.read_text()
    assert text.startswith("# Generated by `mpijob-webhook export vap`")
    # MPIJob rules, and per runtime kind the default TrainJob rules (launcher, worker-count)
    assert len(list(yaml.safe_load_all(text))) == 2 * (8 + 2 * 2)
