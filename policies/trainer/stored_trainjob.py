"""A TrainJob manifest as the API server would store it, for ``check``: fields its CRD does not
declare pruned (with where they probably belong: ``spec.trainer.numNode`` →
``spec.trainer.numNodes``), schema defaults filled in.

The webhook never sees a pruned field, so a misspelt one would pass ``check`` without a word
and the job would run with the runtime's value. Only the v2.2+ shape is pruned, against the
v2.3.0 CRD (``schema/``, made by tools/extract_crd_schema.py; v2.2's differs only in
``terminationGracePeriodSeconds`` in a runtime patch): no v2.1 CRD is carried, and pruning a
v2.1 TrainJob against v2.3's would drop the very fields that make it v2.1.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from policies.mpijob.pruning_defaulting import PrunedField, as_stored
from policies.trainer.api import API_VERSION, TRAINJOB, ApiShape

SCHEMA_FILE = "schema/trainjob-v1alpha1.json"


@cache
def trainjob_crd_schema() -> Mapping[str, Any]:
    return json.loads(resources.files("policies.trainer").joinpath(SCHEMA_FILE).read_text())


def as_stored_trainjob(trainjob: Mapping[str, Any], shape: ApiShape) -> tuple[dict[str, Any], list[PrunedField]]:
    """``trainjob`` pruned and defaulted as a cluster serving ``shape`` would store it, and what
    was pruned; a v2.1 TrainJob is returned as it is (a copy), with nothing said."""
    if shape is ApiShape.V2_1 or trainjob.get("apiVersion") != API_VERSION:
        return copy.deepcopy(dict(trainjob)), []
    return as_stored(trainjob, trainjob_crd_schema(), f"a {API_VERSION} {TRAINJOB}")
