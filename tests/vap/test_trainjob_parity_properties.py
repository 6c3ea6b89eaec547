"""Parity on generated TrainJobs: the exported TrainJob policies and the webhook give the same
rule ids, per action, for any TrainJob the API server would hand to admission, on the runtimes
of the corpus, with the patches TrainJobs carry (the webhook's own entry, Kueue's, a user's)."""
from __future__ import annotations

import copy
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.vap.corpus import namespaces
from tests.vap.test_trainjob_parity import POLICIES, RUNTIMES, exported
from tests.vap.trainjob_corpus import KUEUE, NODE_CONTAINER, OWN_MUTATIONS, job, params_for, pod_patch, runtime_patch
from tests.vap.verdicts import vap_verdict
from tests.vap.trainjob_verdicts import admissible, vap_review, webhook_verdict
from webhook.cel import cel_runtime as evaluator

# cel-python raises the recursion limit when its first environment is made; made here, before
# hypothesis records the limit it restores after each example.
evaluator.compile_expression("true")

GPU = "nvidia.com/gpu"
RUNTIME_NAMES = ("openmpi-cuda", "deepspeed-distributed", "node-parallel-4", "slots-unset", "gpus-12",
                 "two-launchers", "node-container-renamed", "launcher-unlabelled", "torch-distributed")
PATCHES = {
    "none": [],
    "own-mutations": [OWN_MUTATIONS],
    "kueue": [KUEUE],
    "adds-node-container": [runtime_patch("team", {"node": pod_patch(NODE_CONTAINER),
                                                   "launcher": pod_patch(NODE_CONTAINER)})],
}
PER_NODE = st.sampled_from([
    None, {"limits": {GPU: 1}}, {"limits": {GPU: 8}}, {"limits": {GPU: 16}}, {"limits": {GPU: "17"}},
    {"limits": {GPU: "1.5"}}, {"requests": {GPU: 2}}, {"limits": {GPU: 4}, "requests": {GPU: 4}},
    {"limits": {GPU: 4}, "requests": {GPU: 2}}, {"limits": {"cpu": "8", "memory": "40Gi"}},
])
# Each example evaluates a dozen policies per runtime in a CEL interpreter: a tenth of the
# profile's examples (10 by default, 1,000 under HYPOTHESIS_PROFILE=ci).
PARITY = settings(max_examples=max(10, settings().max_examples // 10))


@st.composite
def trainjobs(draw: st.DrawFn) -> dict[str, Any]:
    trainer: dict[str, Any] = {}
    for field, values in (("numNodes", [0, 1, 2, 3, 12, 50, 101, 102]), ("numProcPerNode", [0, 1, 2, 8, 9])):
        if draw(st.booleans()):
            trainer[field] = draw(st.sampled_from(values))
    per_node = draw(PER_NODE)
    if per_node is not None:
        trainer["resourcesPerNode"] = per_node
    name = "p" * draw(st.sampled_from([1, 40, 43, 44, 45, 60]))
    generated = job(draw(st.sampled_from(RUNTIME_NAMES)), name=name, **trainer)
    patches = PATCHES[draw(st.sampled_from(sorted(PATCHES)))]
    if patches:
        generated["spec"]["runtimePatches"] = copy.deepcopy(patches)
    return generated


@PARITY
@given(trainjob=trainjobs(), policy_name=st.sampled_from(("built-in", "actions-and-overrides")), data=st.data())
def test_generated_trainjobs_get_the_webhooks_rule_ids(trainjob, policy_name, data) -> None:
    assume(admissible(trainjob) == [])
    namespace, labels = data.draw(st.sampled_from(namespaces(POLICIES[policy_name])))
    trainjob["metadata"]["namespace"] = namespace
    expected = webhook_verdict(POLICIES[policy_name], trainjob, RUNTIMES, namespace, labels)
    result = vap_review(exported(policy_name), trainjob, params_for(trainjob, RUNTIMES), namespace, labels)
    assert vap_verdict(result) == expected
