"""``mpijob-webhook check``: the webhook's verdict on manifests, before they reach a cluster.

Exit status: 0 every MPIJob and TrainJob would be admitted, 1 at least one would be denied (or a
training runtime given would be refused by the API server), 2 an input (manifest, policy or
cluster-state file) could not be used. ``--output json`` prints a ``CheckReport`` (see
docs/policy.md) for CI pipelines.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from policies.config import PolicyError
from policies.config.reader import default_policy
from policies.messages import plural
from policies.config.layered_policy import Policy
from webhook.cel import check_answers as vap_answers
from webhook.input_files import UnreadablePolicyFile, cannot_read
from webhook.offline import (CLUSTER_KINDS, CLUSTER_STATE, NO_CLUSTER_STATE, BadInput, Checker, Report, cluster_view,
                             documents)
from webhook.policy_reload import own_namespace, read_policy

STDIN = "-"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check", help="check MPIJob and TrainJob manifests offline, exactly as the webhook would",
        description="Evaluate MPIJob and Kubeflow Trainer TrainJob manifests (multi-document YAML; - for stdin)\n"
                    "with the webhook's rules, mutations and messages; the training runtimes TrainJobs name\n"
                    "are read from the same input or from --cluster-state.\n"
                    "Exit 0: all admitted; 1: any denied; 2: bad input.",
        epilog=cluster_state_help(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="manifest files, or - for stdin")
    parser.add_argument("--policy-file", type=Path, metavar="FILE", help="the policy to check against "
                        "(default: the built-in policy)")
    parser.add_argument("--cluster-state", type=Path, metavar="FILE",
                        help=f"YAML of {', '.join(CLUSTER_KINDS[:-1])} and {CLUSTER_KINDS[-1]} objects for the "
                             "cluster-aware rules (see below); without it those rules are reported as skipped")
    parser.add_argument("--namespace", default="default",
                        help="namespace of manifests that name none (default %(default)s)")
    parser.add_argument("--output", "-o", choices=("text", "json"), default="text", help="report format")
    parser.add_argument("--vap", action="store_true",
                        help="also show what the exported ValidatingAdmissionPolicies alone would answer "
                             "(`export vap` of the same policy; needs the cel-python package); exit 1 when "
                             "either would deny")
    parser.set_defaults(run=run)


def cluster_state_help() -> str:
    width = max(len(kind) for kind, _, _ in CLUSTER_STATE)
    kinds = "\n".join(f"  {kind:<{width}} {purpose}" for kind, _, purpose in CLUSTER_STATE)
    resources = ",".join(resource for _, resource, _ in CLUSTER_STATE)
    return (f"--cluster-state reads these objects (any other kind is an error):\n{kinds}\n\n"
            f"All of them from a cluster, in one file:\n"
            f"  kubectl get {resources} -A -o yaml > cluster-state.yaml\n"
            f"(leave out localqueues.kueue.x-k8s.io without Kueue, and the trainer.kubeflow.org\n"
            f"resources without Kubeflow Trainer)")


def run(args: argparse.Namespace) -> int:
    if args.vap and not vap_answers.available():
        print(f"error: {vap_answers.MISSING}", file=sys.stderr)
        return 2
    report = evaluate(args)
    if args.output == "json":
        json.dump(report.to_json(), sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        for line in render_text(report):
            print(line)
        for error in report.errors:
            print(f"error: {error}", file=sys.stderr)
    if report.exit_code == 0 and any(r.get("vap", {}).get("decision") == "denied" for r in report.results):
        return 1
    return report.exit_code


def evaluate(args: argparse.Namespace) -> Report:
    empty = Report((), (), args.cluster_state is not None)
    try:
        policy = _policy(args.policy_file)
        checker = Checker(policy, _cluster(args.cluster_state, args.namespace), args.namespace)
        labels = _namespace_labels(args.cluster_state) if args.vap else {}
    except BadInput as error:
        return empty.with_error(error)
    exported = vap_answers.exported(policy) if args.vap else []
    results: list[dict[str, Any]] = []
    errors: list[BadInput] = []
    inputs: list[tuple[str, int, dict[str, Any]]] = []
    for name in args.files:
        try:
            inputs += [(label(name), index, obj) for index, obj in documents(read(name), label(name))]
        except BadInput as error:
            errors.append(error)
    try:
        checker.add_runtimes(inputs)  # runtimes given beside the TrainJobs, in any order
    except BadInput as error:
        errors.append(error)
    runtimes = _runtimes(inputs, args.cluster_state, args.namespace) if args.vap else []
    for source, index, obj in inputs:
        result = checker.check(obj, source, index)
        if args.vap and result["decision"] != "ignored" and obj.get("kind") in ("MPIJob", "TrainJob"):
            namespace = result["namespace"]
            result["vap"] = vap_answers.answer(exported, obj, namespace, labels.get(namespace, {}), runtimes)
        results.append(result)
    return Report(tuple(results), tuple(errors), args.cluster_state is not None)


def label(name: str) -> str:
    return "<stdin>" if name == STDIN else name


def read(name: str) -> str:
    try:
        if name == STDIN:
            return sys.stdin.read()
        return Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(label(name), cannot_read(exc)) from None


def _policy(path: Path | None) -> Policy:
    if path is None:
        return default_policy(own_namespace())
    try:
        return read_policy(path)[0]
    except UnreadablePolicyFile as exc:
        raise BadInput(str(path), exc.reason) from None
    except PolicyError as exc:
        raise BadInput(str(path), "invalid policy: " + "; ".join(str(p) for p in exc.problems)) from None


def _namespace_labels(path: Path | None) -> dict[str, dict[str, str]]:
    """Labels of the Namespaces in the cluster-state file: the exported policies' overrides
    select namespaces by them, as the webhook's do."""
    if path is None:
        return {}
    found = {}
    for _, obj in documents(read(str(path)), str(path)):
        if obj.get("kind") == "Namespace":
            meta = obj.get("metadata") or {}
            found[str(meta.get("name", ""))] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return found


def _runtimes(inputs: list[tuple[str, int, dict[str, Any]]], cluster_state: Path | None,
              namespace: str) -> list[dict[str, Any]]:
    """Every training runtime of the input and the cluster state, as the API server would hold
    them (a TrainingRuntime that names no namespace in the one the manifests default to)."""
    objects = [obj for _, _, obj in inputs]
    if cluster_state is not None:
        objects += [obj for _, obj in documents(read(str(cluster_state)), str(cluster_state))]
    found = []
    for obj in objects:
        if obj.get("kind") == "TrainingRuntime" and not (obj.get("metadata") or {}).get("namespace"):
            obj = {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": namespace}}
        if obj.get("kind") in ("ClusterTrainingRuntime", "TrainingRuntime"):
            found.append(obj)
    return found


def _cluster(path: Path | None, namespace: str) -> Any:
    if path is None:
        return None
    objects = [(str(path), index, obj) for index, obj in documents(read(str(path)), str(path))]
    return cluster_view(objects, namespace)


def _pruned_lines(result: dict[str, Any]) -> Iterator[str]:
    for pruned in result.get("pruned", ()):
        yield f"  pruned  {pruned['path']}: {pruned['message']}"


def render_text(report: Report) -> Iterator[str]:
    for result in report.results:
        where = f"{result['source']}[{result['document']}]"
        scope = "" if result["namespace"] is None else f"{result['namespace']}/"  # None: cluster-scoped
        what = f"{result['kind']} {scope}{result['name']}"
        if result["decision"] == "ignored":
            why = "a training runtime, read for the TrainJobs" if result["reason"] == "training-runtime" \
                else "not an MPIJob"
            yield f"{where} {result['apiVersion']} {what}: ignored ({why})"
            yield from _pruned_lines(result)
            continue
        note = f" ({result['reason']})" if result["reason"] not in ("checked", "invalid-shape") else ""
        yield f"{where} {what}: {result['decision']}{note}"
        warned = {f["message"] for f in result["findings"] if f["action"] == "warn"}
        for finding in result["findings"]:
            yield f"  {finding['action']:<7} {finding['message']}"
        yield from _pruned_lines(result)
        for warning in result["warnings"]:
            if not any(warning.startswith(w[:60]) for w in warned):
                yield f"  warning {warning}"
        if result["skipped"]:
            reason = "" if report.cluster_state else f" ({NO_CLUSTER_STATE})"
            yield f"  skipped {', '.join(result['skipped'])}{reason}"
        if "vap" in result:
            yield from vap_answers.render(result["vap"])
        mutations = result["mutations"]
        if mutations["patch"]:
            yield f"  mutate  {', '.join(mutations['applied'])}: {len(mutations['patch'])} patch operations"
            for op in mutations["patch"]:
                value = f" = {json.dumps(op['value'])}" if "value" in op else ""
                yield f"          {op['op']} {op['path']}{value}"
    summary = report.summary()
    unread = f"; {plural(summary['errors'], 'input')} could not be read" if summary["errors"] else ""
    yield (f"{plural(summary['documents'], 'document')}: {summary['admitted']} admitted, {summary['denied']} denied, "
           f"{summary['ignored']} ignored{unread}")
