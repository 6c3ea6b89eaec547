"""The upstream TrainJob CRD's structural schema (v2.3.0, the test data's copy), applied as the
API server applies it: what it refuses and what it would prune, as ``path: message`` lines.
CEL rules (x-kubernetes-validations) are not evaluated."""
from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema
import yaml

from testing.crd import _OBJECT_META, _list_map_keys, _path, _to_json_schema
from tests.policies.trainer.trainer_data import CRDS


@cache
def _validator() -> jsonschema.protocols.Validator:
    crd = yaml.safe_load((CRDS / "trainer.kubeflow.org_trainjobs.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = _to_json_schema(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = _OBJECT_META
    cls = jsonschema.validators.extend(jsonschema.Draft7Validator, {"x-kubernetes-list-map-keys": _list_map_keys})
    return cls(schema)


def trainjob_schema_errors(obj: Any) -> list[str]:
    errors = sorted(_validator().iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_path(e.absolute_path)}: {e.message}" for e in errors]
