"""The install instructions stay true — the README's "Install on a cluster", docs/install.md and
docs/operations.md: the verification shows what the server answers; the commands name overlays,
options and objects that exist; the install order never registers the webhook before its
Deployment is Available; the image is built and named as the overlays expect."""
from __future__ import annotations

import base64
import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from testing.builders import admission_review
from tests.conftest import ROOT
from testing.crd import as_api_server_sends
from tests.manifests.build import INSTALL_OVERLAYS, MANIFESTS, NAMESPACE, OVERLAYS, Object, find, kubectl, load_all
from webhook import create_app
from webhook.cli import build_parser

README = (ROOT / "README.md").read_text()
README_INSTALL = README[README.index("## Install on a cluster"):README.index("\n## ", README.index("## Install on a cluster") + 1)]
INSTALL = (ROOT / "docs" / "install.md").read_text()
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()
DOCUMENTS = {"README": README_INSTALL, "install.md": INSTALL, "operations.md": OPERATIONS}
REGISTRATION_LABEL = "mpijob-webhook.kubeflow.org/registration"
NOT_REGISTRATION = f"{REGISTRATION_LABEL}!=true"


def fenced_after(text: str, marker: str) -> str:
    rest = text[text.index(marker):]
    match = re.search(r"```\w*\n(.*?)```", rest, re.S)
    assert match, f"no code block after {marker}"
    return match.group(1)


def bash_blocks(text: str) -> list[list[list[str]]]:
    """Each bash block of ``text`` as its commands (continuation lines joined, comments dropped);
    indented blocks (inside list items) too."""
    blocks = []
    for block in re.findall(r"^ *```bash\n(.*?)^ *```", text, re.S | re.M):
        commands = []
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
        blocks.append(commands)
    return blocks


def shell_commands(text: str) -> list[list[str]]:
    return [words for block in bash_blocks(text) for words in block]


def kubectl_invalid(status: dict[str, Any]) -> str:
    """How kubectl prints a 422 Invalid Status with causes (cmdutil.CheckErr)."""
    details = status["details"]
    prefix = f'The {details["kind"]} "{details["name"]}" is invalid: '
    causes = [f"{c['field']}: {c['message']}" for c in details["causes"]]
    if len(causes) == 1:
        return prefix + causes[0] + "\n"
    return prefix + "\n" + "".join(f"* {cause}\n" for cause in causes)


def post(client: Any, path: str, review: dict[str, Any]) -> dict[str, Any]:
    answer = client.post(path, data=json.dumps(review), content_type="application/json")
    assert answer.status_code == 200
    return answer.get_json()["response"]


def test_the_verification_output_is_what_the_server_answers() -> None:
    job = yaml.safe_load(fenced_after(README_INSTALL, "<!-- verify-job -->"))
    job["metadata"]["namespace"] = "default"
    sent = as_api_server_sends(job)  # CRD defaults applied, as the API server does before admission
    client = create_app().test_client()

    # The API server calls the mutating webhook first and the validating one with the result.
    mutated = post(client, "/mutate", admission_review(sent, namespace="default", dry_run=True))
    assert mutated["allowed"] is True
    if "patch" in mutated:
        sent = jsonpatch.apply_patch(sent, json.loads(base64.b64decode(mutated["patch"])))
    validated = post(client, "/validate", admission_review(sent, namespace="default", dry_run=True))

    assert validated["allowed"] is False
    assert validated["status"]["code"] == 422 and validated["status"]["reason"] == "Invalid"
    assert kubectl_invalid(validated["status"]) == fenced_after(README_INSTALL, "<!-- verify-output -->")


def test_overlays_named_in_the_commands_exist() -> None:
    named = {name for text in DOCUMENTS.values() for name in re.findall(r"manifests/overlays/([\w-]+)", text)}
    assert named == set(OVERLAYS)
    assert all((MANIFESTS / "overlays" / overlay / "kustomization.yaml").is_file() for overlay in named)


def test_certs_commands_parse_with_the_real_cli() -> None:
    certs = [words for words in shell_commands(INSTALL) if words[0].endswith("mpijob-webhook") and words[1] == "certs"]
    assert len(certs) == 2  # make, renew
    for words in certs:
        args = build_parser().parse_args(words[1:])
        assert (args.service, args.namespace) == ("mpijob-webhook", "mpijob-webhook")
        assert str(args.out) == "manifests/overlays/self-signed/tls"


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_deleted_and_patched_objects_exist(overlays: dict[str, list[Object]], overlay: str) -> None:
    objects = overlays[overlay] + overlays["monitoring"]
    kinds = {"validatingwebhookconfiguration": "ValidatingWebhookConfiguration",
             "mutatingwebhookconfiguration": "MutatingWebhookConfiguration", "namespace": "Namespace",
             "clusterrolebinding": "ClusterRoleBinding", "clusterrole": "ClusterRole",
             "servicemonitor": "ServiceMonitor"}
    checked = {}
    for document, text in DOCUMENTS.items():
        checked[document] = 0
        for words in shell_commands(text):
            if words[0] not in ("kubectl", "oc"):
                continue
            if words[1] == "-n":
                words = [words[0], *words[3:]]
            if words[1] not in ("delete", "patch"):
                continue
            kind, name = kinds[words[2]], words[3]
            checked[document] += 1
            obj = find(objects, kind, name)
            if words[1] == "patch":
                patch = json.loads(words[words.index("-p") + 1])
                jsonpatch.apply_patch(obj, [{"op": "test", "path": op["path"], "value": resolve(obj, op["path"])}
                                            for op in patch])
                jsonpatch.apply_patch(obj, patch)
    # README: uninstall 5; operations.md: uninstall 5, switch off 2, soften 2. (install.md has none:
    # the scrape is plain HTTP on the health port, so OpenShift needs no scrape-CA patch.)
    assert checked == {"README": 5, "install.md": 0, "operations.md": 9}


def resolve(obj: Any, pointer: str) -> Any:
    """The value at a JSON pointer; raises if the path does not exist (the patch would fail)."""
    return jsonpatch.JsonPointer(pointer).resolve(obj)


def applies(text: str) -> list[list[str]]:
    return [words for words in shell_commands(text) if words[:2] in (["kubectl", "apply"], ["oc", "apply"])]


def test_applies_that_carry_the_crd_are_server_side(overlays: dict[str, list[Object]]) -> None:
    """A client-side apply keeps the whole object in an annotation, limited to 256 KiB in total:
    the MPIJob CRD does not fit, so every apply that carries it must be server-side."""
    crd = find(overlays["openshift"], "CustomResourceDefinition", "mpijobs.kubeflow.org")
    assert len(json.dumps(crd, separators=(",", ":"))) > 256 * 1024
    counted = {}
    for document, text in DOCUMENTS.items():
        carrying = [words for words in applies(text)
                    if "-f" in words or "-k" in words and "monitoring" not in words[words.index("-k") + 1]]
        counted[document] = len(carrying)
        for words in carrying:
            assert "--server-side" in words and "--force-conflicts" in words, words
            if "-f" in words:
                assert (ROOT / words[words.index("-f") + 1]).is_file()
    # README: the install's two applies, the CRD restore; install.md: the order's example, the
    # three overlays' two each, the self-signed renewal; operations.md: the CRD restore
    assert counted == {"README": 3, "install.md": 9, "operations.md": 1}


# --- the install order -----------------------------------------------------------------------

def selected(obj: Object, selector: str) -> bool:
    """A label selector of the one form the install uses, ``key!=value``, as kubectl reads it:
    an object without the label matches too."""
    key, value = re.fullmatch(r"([\w./-]+)!=([\w.-]+)", selector).groups()  # type: ignore[union-attr]
    return (obj["metadata"].get("labels") or {}).get(key) != value


def calls_the_webhook(obj: Object) -> bool:
    """An object whose existence makes the API server call the webhook's Service."""
    def ours(client_config: dict[str, Any]) -> bool:
        return client_config.get("service", {}).get("namespace") == NAMESPACE
    if obj["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        return any(ours(hook["clientConfig"]) for hook in obj["webhooks"])
    if obj["kind"] == "CustomResourceDefinition":
        conversion = obj["spec"].get("conversion", {})
        return conversion.get("strategy") == "Webhook" and ours(conversion["webhook"]["clientConfig"])
    return False


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_the_first_step_holds_everything_but_what_calls_the_webhook(overlays: dict[str, list[Object]],
                                                                   overlay: str) -> None:
    objects = overlays[overlay]
    first = [o for o in objects if selected(o, NOT_REGISTRATION)]
    held_back = [o for o in objects if not selected(o, NOT_REGISTRATION)]
    assert sorted(o["kind"] for o in held_back) == [
        "CustomResourceDefinition", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    assert all(calls_the_webhook(o) for o in held_back)
    assert not any(calls_the_webhook(o) for o in first)
    assert find(first, "Deployment", "mpijob-webhook") and find(first, "Service", "mpijob-webhook")
    fail_closed = [hook for o in held_back if o["kind"].endswith("WebhookConfiguration") for hook in o["webhooks"]]
    assert {hook["failurePolicy"] for hook in fail_closed} == {"Fail"}  # why the order matters


def install_sequences(text: str) -> dict[str, list[list[str]]]:
    """Per overlay: the bash block that installs it (its first apply uses the selector)."""
    found = {}
    for block in bash_blocks(text):
        first = [words for words in block if words[1:2] == ["apply"] and "-l" in words]
        if first:
            overlay = first[0][first[0].index("-k") + 1].removeprefix("manifests/overlays/")
            found.setdefault(overlay, block)
    return found


@pytest.mark.parametrize("document", ["README", "install.md"])
def test_the_documented_install_waits_for_the_deployment_before_registering(document: str) -> None:
    sequences = install_sequences(DOCUMENTS[document])
    if document == "install.md":
        assert set(sequences) == set(INSTALL_OVERLAYS)
    assert sequences
    for overlay, block in sequences.items():
        steps = [words for words in block if words[0] in ("kubectl", "oc") and "certificate/" not in " ".join(words)]
        first, wait, last = steps
        assert first[:2] == [first[0], "apply"] and first[first.index("-l") + 1] == NOT_REGISTRATION, first
        assert wait[1:] == ["-n", NAMESPACE, "wait", "deployment/mpijob-webhook", "--for=condition=Available",
                            "--timeout=5m"], wait
        assert last[:2] == [last[0], "apply"] and "-l" not in last
        assert last[last.index("-k") + 1] == first[first.index("-k") + 1] == f"manifests/overlays/{overlay}"


def test_the_deployment_is_available_only_with_every_replica_ready(overlays: dict[str, list[Object]]) -> None:
    """Available means replicas − maxUnavailable ready pods; ready means /readyz answered 200."""
    deployment = find(overlays["openshift"], "Deployment", "mpijob-webhook")
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


# --- the image ---------------------------------------------------------------------------------

def test_the_documented_build_arguments_are_the_dockerfiles() -> None:
    declared = set(re.findall(r"^ARG (\w+)", (ROOT / "Dockerfile").read_text(), re.M))
    documented = {arg.split("=")[0] for text in (README_INSTALL, INSTALL)
                  for arg in re.findall(r"--build-arg (\S+)", text)} | set(re.findall(r"`(BASE_IMAGE)`", README_INSTALL))
    assert documented == declared == {"BASE_IMAGE"}
    builds = [words for text in (README_INSTALL, INSTALL) for words in shell_commands(text) if words[1:2] == ["build"]]
    assert builds and all(words[0] == "podman" and words[-1] == "." and "-t" in words for words in builds)


def test_the_base_names_the_deployments_image_as_documented(overlays: dict[str, list[Object]]) -> None:
    base = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())
    (entry,) = base["images"]
    documented = yaml.safe_load(fenced_after(INSTALL, "<!-- image-in-base -->"))["images"][0]
    assert entry["name"] == documented["name"] == "mpijob-webhook"
    assert set(entry) == set(documented) == {"name", "newName", "newTag"}
    (container,) = find(overlays["openshift"], "Deployment", "mpijob-webhook")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{entry['newName']}:{entry['newTag']}"


def test_an_overlay_of_your_own_replaces_the_image(prepared_manifests: Path, tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    shutil.copytree(prepared_manifests, root / "manifests")
    own = yaml.safe_load(fenced_after(INSTALL, "<!-- image-own-overlay -->"))
    (root / "my-cluster").mkdir()
    (root / "my-cluster" / "kustomization.yaml").write_text(yaml.safe_dump(own))
    objects = load_all(kubectl("kustomize", str(root / "my-cluster")))
    (container,) = find(objects, "Deployment", "mpijob-webhook")["spec"]["template"]["spec"]["containers"]
    (image,) = own["images"]
    assert container["image"] == f"{image['newName']}:{image['newTag']}"
