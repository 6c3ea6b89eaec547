"""A ClusterTrainingRuntime or TrainingRuntime checked against its CRD, as the API server would.

The webhook reads runtimes from its watch cache: the API server checked them before storing
them. ``check`` reads them from files a person wrote, where a runtime may carry a string for an
integer or a misspelt field; evaluated as it is, it would give TrainJobs a verdict no cluster
can give (no cluster holds that runtime). So ``check`` puts each runtime through this first:
the fields the API server would refuse (types, required fields), and the runtime as the API
server would store it (unknown fields pruned, with where they probably belong; schema defaults
filled in). CEL rules and formats are not evaluated: the ``training-runtime`` rule checks what
an MPI runtime needs.

Unlike the TrainJob's (``type_check``, only the fields the webhook reads), this check needs every
field a runtime's JobSet template declares, to say what would be pruned: the schema is the
upstream CRD's own, stripped of its descriptions (``schema/``, made by
tools/extract_crd_schema.py from Trainer v2.3.0's CRDs; both kinds share it). The v2.1 runtime
CRD differs from it only in the torch policy (``elasticPolicy``, ``numProcPerNode``), not in any
field an MPI runtime uses.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from policies.interface import Finding
from policies.mpijob.crd_type_check import OBJECT_META, schema_check
from policies.mpijob.pruning_defaulting import PrunedField, as_stored
from policies.trainer.api import API_VERSION

SCHEMA_FILE = "schema/trainingruntime-v1alpha1.json"


@cache
def runtime_schema() -> Mapping[str, Any]:
    return json.loads(resources.files("policies.trainer").joinpath(SCHEMA_FILE).read_text())


@cache
def _check() -> Callable[[Any], list[Finding]]:
    schema = runtime_schema()
    # The CRD leaves the object's own metadata to the API server; its ObjectMeta fields are checked too.
    return schema_check({**schema, "properties": {**schema["properties"], "metadata": OBJECT_META}})


@dataclass(frozen=True)
class CheckedRuntime:
    stored: dict[str, Any]  # the runtime as the API server would store it (pruned, defaulted)
    refused: tuple[Finding, ...]  # why the API server would refuse it (rule ``object-shape``): none when valid
    pruned: tuple[PrunedField, ...]  # the fields it would drop

    @property
    def valid(self) -> bool:
        return not self.refused


def check_runtime(runtime: Mapping[str, Any]) -> CheckedRuntime:
    """``runtime`` (a ClusterTrainingRuntime or TrainingRuntime) against the runtime CRD."""
    refused = _check()(runtime)
    kind = runtime.get("kind") if isinstance(runtime.get("kind"), str) else "training runtime"
    stored, pruned = as_stored(runtime, runtime_schema(), f"a {API_VERSION} {kind}")
    return CheckedRuntime(stored, tuple(refused), tuple(pruned))
