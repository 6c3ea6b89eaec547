"""The webhook configurations: what the API server sends us, where, and what it does when we
do not answer; and the CA each overlay puts in front of them."""
from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from certs.authority import service_dns_names
from tests.manifests.build import INSTALL_OVERLAYS, NAMESPACE, SERVICE, Object, find, find_all
from webhook import create_app

WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


CONFIGURATION_NAMES = {"ValidatingWebhookConfiguration": "mpijob-webhook",
                       "MutatingWebhookConfiguration": "kubeflow-mpijob-webhook"}


def webhooks(objects: list[Object], kind: str) -> list[dict[str, Any]]:
    return find(objects, kind, CONFIGURATION_NAMES[kind])["webhooks"]


def all_webhooks(objects: list[Object]) -> list[dict[str, Any]]:
    return [w for kind in WEBHOOK_KINDS for w in webhooks(objects, kind)]


def namespace_selected(selector: dict[str, Any], namespace: str) -> bool:
    """Kubernetes label selector semantics, for the label every namespace carries."""
    labels = {"kubernetes.io/metadata.name": namespace}
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        value = labels.get(expression["key"])
        operator = expression["operator"]
        if operator == "In" and value not in expression["values"]:
            return False
        if operator == "NotIn" and value in expression["values"]:
            return False
        if operator == "Exists" and value is None:
            return False
        if operator == "DoesNotExist" and value is not None:
            return False
    return True


def served_paths(method: str) -> set[str]:
    return {rule.rule for rule in create_app().url_map.iter_rules() if method in (rule.methods or ())}


def webhook_services(objects: list[Object]) -> list[tuple[str, dict[str, Any]]]:
    """(what, clientConfig.service) of every webhook the API server calls, conversion included."""
    found = [(f"{w['name']}", w["clientConfig"]["service"]) for w in all_webhooks(objects)]
    for crd in find_all(objects, "CustomResourceDefinition"):
        conversion = crd["spec"].get("conversion", {})
        if conversion.get("strategy") == "Webhook":
            found.append((f"conversion of {crd['metadata']['name']}", conversion["webhook"]["clientConfig"]["service"]))
    return found


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
class TestRegistration:
    def test_validating(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        (hook,) = webhooks(overlays[overlay], "ValidatingWebhookConfiguration")
        assert hook["failurePolicy"] == "Fail"
        assert hook["timeoutSeconds"] <= 5
        assert hook["sideEffects"] == "None"  # or dry-run requests would be refused
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["matchPolicy"] == "Equivalent"
        assert hook["rules"] == [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v2beta1"],
                                  "operations": ["CREATE", "UPDATE"], "resources": ["mpijobs"],
                                  "scope": "Namespaced"},
                                 {"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"],
                                  "operations": ["CREATE", "UPDATE"], "resources": ["trainjobs"],
                                  "scope": "Namespaced"}]

    def test_mutating(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        (hook,) = webhooks(overlays[overlay], "MutatingWebhookConfiguration")
        assert hook["failurePolicy"] == "Fail"  # the trade-off is written next to it in webhooks.yaml
        assert hook["reinvocationPolicy"] == "IfNeeded"
        assert hook["timeoutSeconds"] <= 5
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["matchPolicy"] == "Equivalent"
        assert hook["rules"] == [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v2beta1"],
                                  "operations": ["CREATE"], "resources": ["mpijobs"], "scope": "Namespaced"},
                                 {"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"],
                                  "operations": ["CREATE"], "resources": ["trainjobs"], "scope": "Namespaced"}]

    def test_mutating_configuration_runs_before_kueues(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        # Mutating configurations are called in the lexical order of their names; Kueue suspends
        # an MPIJob only if the queue label is already there when its webhook runs.
        (config,) = [o for o in overlays[overlay] if o["kind"] == "MutatingWebhookConfiguration"]
        assert config["metadata"]["name"] == CONFIGURATION_NAMES["MutatingWebhookConfiguration"]
        assert config["metadata"]["name"] < "kueue-mutating-webhook-configuration"

    def test_kube_system_and_own_namespace_are_never_sent(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        objects = overlays[overlay]
        own = find(objects, "Deployment", "mpijob-webhook")["metadata"]["namespace"]
        for hook in all_webhooks(objects):
            selector = hook["namespaceSelector"]
            assert not namespace_selected(selector, "kube-system"), hook["name"]
            assert not namespace_selected(selector, own), hook["name"]
            for namespace in ("default", "team-a", "kube-public", "mpijob-webhook-test"):
                assert namespace_selected(selector, namespace), (hook["name"], namespace)

    def test_names_are_unique_and_qualified(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        names = [hook["name"] for hook in all_webhooks(overlays[overlay])]
        assert len(set(names)) == len(names)
        assert all(name.count(".") >= 2 for name in names)

    def test_every_webhook_calls_a_route_the_server_has(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        objects = overlays[overlay]
        service = find(objects, "Service", SERVICE)
        service_ports = {p["port"] for p in service["spec"]["ports"]}
        paths = served_paths("POST")
        for what, target in webhook_services(objects):
            assert (target["name"], target["namespace"]) == (SERVICE, service["metadata"]["namespace"]), what
            assert target.get("port", 443) in service_ports, what
            assert target["path"] in paths, f"{what} calls {target['path']}, served: {sorted(paths)}"


def annotations(obj: Object) -> dict[str, str]:
    return obj["metadata"].get("annotations", {})


def ca_consumers(objects: list[Object]) -> list[Object]:
    """Objects whose caBundle must trust the serving certificate: both webhook configurations
    and the MPIJob CRD (its conversion webhook)."""
    consumers = [find(objects, kind, CONFIGURATION_NAMES[kind]) for kind in WEBHOOK_KINDS]
    crd = find(objects, "CustomResourceDefinition", "mpijobs.kubeflow.org")
    assert crd["spec"]["conversion"]["strategy"] == "Webhook"
    return [*consumers, crd]


def serving_secret_name(objects: list[Object]) -> str:
    volumes = find(objects, "Deployment", "mpijob-webhook")["spec"]["template"]["spec"]["volumes"]
    (name,) = [v["secret"]["secretName"] for v in volumes if "secret" in v]
    return name


def test_openshift_service_ca_issues_and_injects(overlays: dict[str, list[Object]]) -> None:
    objects = overlays["openshift"]
    service = find(objects, "Service", SERVICE)
    assert annotations(service)["service.beta.openshift.io/serving-cert-secret-name"] == serving_secret_name(objects)
    for consumer in ca_consumers(objects):
        assert annotations(consumer)["service.beta.openshift.io/inject-cabundle"] == "true", consumer["kind"]
        assert not any("cert-manager.io" in key for key in annotations(consumer))
    assert find_all(objects, "Certificate") == [] and find_all(objects, "Secret") == []


def test_cert_manager_issues_and_injects(overlays: dict[str, list[Object]]) -> None:
    objects = overlays["cert-manager"]
    certificates = {c["metadata"]["name"]: c for c in find_all(objects, "Certificate")}
    issuers = {i["metadata"]["name"]: i for i in find_all(objects, "Issuer")}
    for consumer in ca_consumers(objects):
        namespace, name = annotations(consumer)["cert-manager.io/inject-ca-from"].split("/")
        assert namespace == NAMESPACE and name in certificates, consumer["kind"]
        serving = certificates[name]
        assert serving["metadata"]["namespace"] == namespace
        assert not any("openshift.io" in key for key in annotations(consumer))
    serving = certificates[annotations(ca_consumers(objects)[0])["cert-manager.io/inject-ca-from"].split("/")[1]]
    spec = serving["spec"]
    assert spec["secretName"] == serving_secret_name(objects)
    assert set(service_dns_names(SERVICE, NAMESPACE)) <= set(spec["dnsNames"])
    assert "server auth" in spec["usages"] and not spec.get("isCA", False)
    assert spec["renewBefore"] and spec["privateKey"]["rotationPolicy"] == "Always"
    # The serving certificate comes from a CA issuer whose CA is itself a cert-manager Certificate.
    ca_issuer = issuers[spec["issuerRef"]["name"]]
    ca = next(c for c in certificates.values() if c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"])
    assert ca["spec"]["isCA"] is True
    assert "selfSigned" in issuers[ca["spec"]["issuerRef"]["name"]]["spec"]


def test_self_signed_bundle_trusts_the_served_certificate(overlays: dict[str, list[Object]]) -> None:
    objects = overlays["self-signed"]
    secret = find(objects, "Secret", serving_secret_name(objects))
    assert secret["type"] == "kubernetes.io/tls"
    data = {key: base64.b64decode(value) for key, value in secret["data"].items()}
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    served = x509.load_pem_x509_certificate(data["tls.crt"])
    for consumer in ca_consumers(objects):
        configs = ([w["clientConfig"] for w in consumer["webhooks"]] if "webhooks" in consumer
                   else [consumer["spec"]["conversion"]["webhook"]["clientConfig"]])
        for config in configs:
            assert x509.load_pem_x509_certificates(base64.b64decode(config["caBundle"])) == [ca], consumer["kind"]
        assert not any("cert-manager.io" in k or "openshift.io" in k for k in annotations(consumer))
    # What the API server checks: the served certificate chains to the caBundle for the Service's name.
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName(f"{SERVICE}.{NAMESPACE}.svc"))
    verifier.verify(served, [])
