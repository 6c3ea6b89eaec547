"""Regenerate policies/mpijob/schema/mpijob-v2beta1.json from the upstream v2beta1 CRD.

The CRD's openAPIV3Schema is ~670 KB, mostly descriptions. The shape rule only needs the
structural keywords, so this keeps those and drops the prose.

    python tools/extract_crd_schema.py tests/data/upstream/crd/mpijobs-v2beta1.yaml
"""
import json
import sys
from pathlib import Path

import yaml

KEEP = {
    "type", "properties", "additionalProperties", "items", "enum", "required", "anyOf",
    "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields", "format", "default",
}


def strip(node):
    if isinstance(node, list):
        return [strip(v) for v in node]
    if not isinstance(node, dict):
        return node
    kept = {}
    for key, value in node.items():
        if key == "properties":  # property names are data, not keywords: keep them all
            kept[key] = {name: strip(sub) for name, sub in value.items()}
        elif key in KEEP:
            kept[key] = strip(value)
    return kept


def main(crd_path: str) -> None:
    crd = yaml.safe_load(Path(crd_path).read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v2beta1")
    schema = strip(version["schema"]["openAPIV3Schema"])
    out = Path(__file__).resolve().parent.parent / "policies" / "mpijob" / "schema" / "mpijob-v2beta1.json"
    out.write_text(json.dumps(schema, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])
