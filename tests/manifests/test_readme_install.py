"""The README's "Install" section stays true: its verification shows what the server answers, its
commands name overlays, options and objects that exist."""
from __future__ import annotations

import base64
import json
import re
import shlex
from typing import Any

import jsonpatch
import pytest
import yaml

from testing.builders import admission_review
from tests.conftest import ROOT
from testing.crd import as_api_server_sends
from tests.manifests.build import MANIFESTS, OVERLAYS, Object, find
from webhook import create_app
from webhook.cli import build_parser

README = (ROOT / "README.md").read_text()
INSTALL = README[README.index("<!-- section: install -->"):README.index("<!-- end: install -->")]


def fenced_after(marker: str) -> str:
    rest = INSTALL[INSTALL.index(marker):]
    match = re.search(r"```\w*\n(.*?)```", rest, re.S)
    assert match, f"no code block after {marker}"
    return match.group(1)


def shell_commands() -> list[list[str]]:
    """Every command of the section's bash blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", INSTALL, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


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
    job = yaml.safe_load(fenced_after("<!-- verify-job -->"))
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
    assert kubectl_invalid(validated["status"]) == fenced_after("<!-- verify-output -->")


def test_overlays_named_in_the_commands_exist() -> None:
    named = set(re.findall(r"manifests/overlays/([\w-]+)", INSTALL)) - {"<overlay>"}
    assert named == set(OVERLAYS)
    assert all((MANIFESTS / "overlays" / overlay / "kustomization.yaml").is_file() for overlay in named)


def test_certs_commands_parse_with_the_real_cli() -> None:
    certs = [words for words in shell_commands() if words[:2] == ["mpijob-webhook", "certs"]]
    assert len(certs) == 2  # make, renew
    for words in certs:
        args = build_parser().parse_args(words[1:])
        assert (args.service, args.namespace) == ("mpijob-webhook", "mpijob-webhook")
        assert str(args.out) == "manifests/overlays/self-signed/tls"


@pytest.mark.parametrize("overlay", ["openshift", "cert-manager", "self-signed"])
def test_deleted_and_patched_objects_exist(overlays: dict[str, list[Object]], overlay: str) -> None:
    objects = overlays[overlay] + overlays["monitoring"]
    kinds = {"validatingwebhookconfiguration": "ValidatingWebhookConfiguration",
             "mutatingwebhookconfiguration": "MutatingWebhookConfiguration", "namespace": "Namespace",
             "clusterrolebinding": "ClusterRoleBinding", "clusterrole": "ClusterRole",
             "servicemonitor": "ServiceMonitor"}
    checked = 0
    for words in shell_commands():
        if words[0] not in ("kubectl", "oc"):
            continue
        if words[1] == "-n":
            words = [words[0], *words[3:]]
        if words[1] not in ("delete", "patch"):
            continue
        kind, name = kinds[words[2]], words[3]
        checked += 1
        obj = find(objects, kind, name)
        if words[1] == "patch":
            patch = json.loads(words[words.index("-p") + 1])
            jsonpatch.apply_patch(obj, [{"op": "test", "path": op["path"], "value": resolve(obj, op["path"])}
                                        for op in patch])
            jsonpatch.apply_patch(obj, patch)
    assert checked == 10  # uninstall 5, switch off 2, soften 2, OpenShift scrape CA 1


def resolve(obj: Any, pointer: str) -> Any:
    """The value at a JSON pointer; raises if the path does not exist (the patch would fail)."""
    return jsonpatch.JsonPointer(pointer).resolve(obj)


def test_applies_that_carry_the_crd_are_server_side(overlays: dict[str, list[Object]]) -> None:
    """A client-side apply keeps the whole object in an annotation, limited to 256 KiB in total:
    the MPIJob CRD does not fit, so every apply that carries it must be server-side."""
    crd = find(overlays["openshift"], "CustomResourceDefinition", "mpijobs.kubeflow.org")
    assert len(json.dumps(crd, separators=(",", ":"))) > 256 * 1024
    applies = [words for words in shell_commands() if words[:2] in (["kubectl", "apply"], ["oc", "apply"])]
    carrying = [words for words in applies if "-k" in words and words[words.index("-k") + 1] != "manifests/overlays/monitoring"
                or "-f" in words]
    assert len(carrying) == 5  # openshift, cert-manager, self-signed and its renewal, the CRD restore
    for words in carrying:
        assert "--server-side" in words and "--force-conflicts" in words, words
        if "-f" in words:
            assert (ROOT / words[words.index("-f") + 1]).is_file()
