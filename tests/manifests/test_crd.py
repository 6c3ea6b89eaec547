"""manifests/crd: the multi-version MPIJob CRD built with the real kustomize, its conversion
webhook, its served schemas against the upstream examples, and the serve-v1 component."""
from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.conftest import UPSTREAM, load_yaml_documents
from tests.manifests.build import INSTALL_OVERLAYS, MANIFESTS, NAMESPACE, SERVICE, Object, find, kubectl, load_all
from webhook.routes import routes

CRD_NAME = "mpijobs.kubeflow.org"


def build_dir(path: Path) -> list[Object]:
    return load_all(kubectl("kustomize", str(path)))


@pytest.fixture(scope="module")
def crd() -> Object:
    (only,) = build_dir(MANIFESTS / "crd")
    return only


@pytest.fixture(scope="module")
def crd_with_v1(tmp_path_factory) -> Object:
    """The CRD as an overlay that adds the serve-v1 component builds it."""
    overlay = tmp_path_factory.mktemp("migration")
    crd = os.path.relpath(MANIFESTS / "crd", overlay)
    (overlay / "kustomization.yaml").write_text(
        f"resources:\n  - {crd}\ncomponents:\n  - {crd}/serve-v1\n")
    (only,) = build_dir(overlay)
    return only


def versions(crd: Object) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in crd["spec"]["versions"]}


def priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version priority: GA over beta over alpha, then higher numbers first."""
    major, stage, minor = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version).groups()
    return ({"alpha": 0, "beta": 1, None: 2}[stage], int(major), int(minor or 0))


def test_v2beta1_is_stored_and_preferred_beside_the_served_older_versions(crd):
    served = versions(crd)
    assert crd["metadata"]["name"] == CRD_NAME
    assert {name: (v["served"], v["storage"]) for name, v in served.items()} == {
        "v2beta1": (True, True), "v1alpha2": (True, False), "v1alpha1": (True, False)}
    assert max(served, key=priority) == "v2beta1"
    assert "v1" not in served
    for name in ("v1alpha1", "v1alpha2"):
        assert served[name]["deprecated"] is True
        assert "runs as kubeflow.org/v2beta1" in served[name]["deprecationWarning"]
        assert served[name]["subresources"] == {"status": {}}


def test_the_stored_version_is_the_upstream_crd_verbatim(crd):
    (upstream,) = load_all((UPSTREAM / "crd" / "mpijobs-v2beta1.yaml").read_text())
    assert (MANIFESTS / "crd" / "upstream" / "mpijobs.kubeflow.org.yaml").read_text() == \
        (UPSTREAM / "crd" / "mpijobs-v2beta1.yaml").read_text()
    assert versions(crd)["v2beta1"] == upstream["spec"]["versions"][0]
    assert {k: v for k, v in crd["spec"].items() if k not in ("versions", "conversion")} == \
        {k: v for k, v in upstream["spec"].items() if k != "versions"}


def test_conversion_calls_the_webhook_service_at_a_served_path(crd):
    conversion = crd["spec"]["conversion"]
    assert conversion["strategy"] == "Webhook"
    assert conversion["webhook"]["conversionReviewVersions"] == ["v1", "v1beta1"]
    assert conversion["webhook"]["clientConfig"] == {
        "service": {"namespace": NAMESPACE, "name": SERVICE, "path": "/convert", "port": 443}}
    service = find(build_dir(MANIFESTS / "base"), "Service", SERVICE)
    assert 443 in {p["port"] for p in service["spec"]["ports"]}
    assert any(rule.rule == "/convert" and "POST" in rule.methods for rule in _url_rules())


def _url_rules():
    from flask import Flask

    app = Flask(__name__)
    app.register_blueprint(routes)
    return list(app.url_map.iter_rules())


@pytest.mark.parametrize("kubernetes", ["1.29", "1.36"])
def test_the_crd_is_a_valid_kubernetes_object(crd, crd_with_v1, kubernetes):
    kubernetes_validate.validate(crd, kubernetes, strict=True)
    kubernetes_validate.validate(crd_with_v1, kubernetes, strict=True)


def _structural_problems(schema: dict[str, Any], path: str) -> list[str]:
    """The parts of the structural-schema rules the added versions could break."""
    problems = []
    if "type" not in schema and not schema.get("x-kubernetes-int-or-string"):
        problems.append(f"{path}: no type")
    for junctor in ("oneOf", "anyOf", "allOf", "not"):
        if junctor in schema:
            problems.append(f"{path}: {junctor} (typed junctors are not structural)")
    for name, child in (schema.get("properties") or {}).items():
        problems.extend(_structural_problems(child, f"{path}.{name}"))
    return problems


def test_the_older_versions_have_structural_schemas(crd, crd_with_v1):
    for version in (*versions(crd).values(), versions(crd_with_v1)["v1"]):
        if version["name"] == "v2beta1":
            continue
        schema = version["schema"]["openAPIV3Schema"]
        assert _structural_problems(schema, version["name"]) == []
        assert schema["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] is True
        assert schema["properties"]["status"]["x-kubernetes-preserve-unknown-fields"] is True


def _schema_problems(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Types, bounds and enums of the declared fields (what the API server checks of these)."""
    kinds = {"object": dict, "array": list, "string": str, "integer": int, "boolean": bool}
    expected = kinds.get(schema.get("type", ""), object)
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        return [f"{path}: not {schema['type']}"]
    problems = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"] or "maximum" in schema and value > schema["maximum"]:
        problems.append(f"{path}: {value} out of bounds")
    for name, child in (schema.get("properties") or {}).items():
        if isinstance(value, dict) and name in value:
            problems.extend(_schema_problems(value[name], child, f"{path}.{name}"))
    return problems


@pytest.mark.parametrize("example", sorted(p.relative_to(UPSTREAM).as_posix() for folder in ("v1alpha1", "v1alpha2", "v1")
                                           for p in (UPSTREAM / folder).glob("*.yaml")))
def test_every_upstream_example_of_an_older_version_is_accepted_by_its_schema(example, crd_with_v1):
    job = load_yaml_documents(UPSTREAM / example)[0]
    served = versions(crd_with_v1)
    version = served[job["apiVersion"].split("/")[1]]
    assert _schema_problems(job, version["schema"]["openAPIV3Schema"], "") == []
    if version["name"] == "v1alpha1":
        sizes = [key for key in ("gpus", "processingUnits", "replicas") if key in job["spec"]]
        assert len(sizes) == 1  # the CEL rule's condition
        (rule,) = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
        assert rule["message"] == "set only one of gpus, processingUnits or replicas"


def test_serve_v1_adds_v1_which_then_outranks_v2beta1(crd_with_v1):
    served = versions(crd_with_v1)
    assert {name: (v["served"], v["storage"]) for name, v in served.items()} == {
        "v2beta1": (True, True), "v1alpha2": (True, False), "v1alpha1": (True, False), "v1": (True, False)}
    assert max(served, key=priority) == "v1"  # why it is not in the default install
    assert "migration only" in served["v1"]["deprecationWarning"]


@pytest.fixture(scope="module")
def installs_with_crd(overlays) -> dict[str, list[Object]]:
    """The install overlays: manifests/base includes ../crd."""
    return {overlay: overlays[overlay] for overlay in INSTALL_OVERLAYS}


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_included_from_the_base_the_crd_gets_the_overlays_ca_and_keeps_its_service(installs_with_crd, overlay):
    objects = installs_with_crd[overlay]
    crd = find(objects, "CustomResourceDefinition", CRD_NAME)
    assert "namespace" not in crd["metadata"]
    client = crd["spec"]["conversion"]["webhook"]["clientConfig"]
    assert client["service"] == {"namespace": NAMESPACE, "name": SERVICE, "path": "/convert", "port": 443}
    annotations = crd["metadata"].get("annotations", {})
    if overlay == "openshift":
        assert annotations["service.beta.openshift.io/inject-cabundle"] == "true"
    elif overlay == "cert-manager":
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/mpijob-webhook-serving"
    else:
        secret = find(objects, "Secret", "mpijob-webhook-tls")
        assert base64.b64decode(client["caBundle"]) == base64.b64decode(secret["data"]["ca.crt"])
    for kubernetes in ("1.29", "1.36"):
        kubernetes_validate.validate(crd, kubernetes, strict=True)
