"""The TrainJob's structural schema applied as the API server applies it: what it refuses and
what it would prune, as ``path: message`` lines. The v2.2+ shape is the upstream CRD's (v2.3.0,
the test data's copy); the v2.1 shape is a schema written from v2.1's field list (the test
data's ``v2.1-shape/``, see its README: no upstream file). CEL rules (x-kubernetes-validations)
are not evaluated."""
from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema
import yaml

from testing.crd import OBJECT_META, _list_map_keys, _path, _to_json_schema
from tests.policies.trainer.trainer_data import CRDS, DATA

V2_1_SCHEMA = DATA / "v2.1-shape" / "trainjob-structural-schema.yaml"


@cache
def _validator(v2_1: bool = False) -> jsonschema.protocols.Validator:
    if v2_1:
        openapi = yaml.safe_load(V2_1_SCHEMA.read_text())
    else:
        crd = yaml.safe_load((CRDS / "trainer.kubeflow.org_trainjobs.yaml").read_text())
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
        openapi = version["schema"]["openAPIV3Schema"]
    schema = _to_json_schema(openapi)
    schema["properties"]["metadata"] = OBJECT_META
    cls = jsonschema.validators.extend(jsonschema.Draft7Validator, {"x-kubernetes-list-map-keys": _list_map_keys})
    return cls(schema)


def trainjob_schema_errors(obj: Any) -> list[str]:
    """Against the v2.3.0 CRD (the v2.2+ shape)."""
    return _errors(_validator(), obj)


def trainjob_v2_1_schema_errors(obj: Any) -> list[str]:
    """Against the v2.1 shape: also every field v2.1 does not declare (it would be pruned)."""
    return _errors(_validator(v2_1=True), obj)


def _errors(validator: jsonschema.protocols.Validator, obj: Any) -> list[str]:
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_path(e.absolute_path)}: {e.message}" for e in errors]
