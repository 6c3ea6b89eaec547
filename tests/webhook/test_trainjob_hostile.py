"""A TrainJob of any shape gets a well-formed answer from /validate and /mutate: never an error
(500 in the body), whatever its fields hold."""
from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from policies.cluster_view import StaticClusterView
from tests.policies.trainer.trainer_data import runtime, trainjob, trainjob_review
from testing.app_client import webhook

VIEW = StaticClusterView(cluster_runtimes={"deepspeed-distributed": runtime("runtimes/v2.3.0/deepspeed_distributed.yaml")})
SERVED = webhook(cluster=VIEW)

junk = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.text(max_size=5)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.sampled_from(["name", "limits", "requests", "nvidia.com/gpu",
                                                                             "template", "spec", "replicatedJobs"]),
                                                            inner, max_size=3)),
                    max_leaves=8)
FIELDS = [("spec", "trainer"), ("spec", "trainer", "numNodes"), ("spec", "trainer", "numProcPerNode"),
          ("spec", "trainer", "resourcesPerNode"), ("spec", "trainer", "resourcesPerNode", "limits"),
          ("spec", "trainer", "image"), ("spec", "runtimePatches"), ("spec", "podTemplateOverrides"),
          ("spec", "runtimeRef"), ("spec", "runtimeRef", "kind"), ("metadata", "labels"), ("spec",),
          ("spec", "suspend"), ("spec", "managedBy"), ("status",)]


@given(st.lists(st.tuples(st.sampled_from(FIELDS), junk), min_size=1, max_size=4))
def test_any_field_value_gets_an_answer_not_an_error(edits):
    job = trainjob(numNodes=4, resourcesPerNode={"limits": {"nvidia.com/gpu": 2}})
    for path, value in edits:
        node = job
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[path[-1]] = copy.deepcopy(value)
    for endpoint in ("/validate", "/mutate"):
        response = SERVED.review(endpoint, trainjob_review(job))["response"]
        assert response.get("status", {}).get("code") != 500, response
        assert SERVED.last.reason != "error"
