"""Regenerate the structural schemas the webhook carries, from the upstream CRDs in tests/data.

A CRD's openAPIV3Schema is mostly descriptions. The type check and pruning need only the
structural keywords, so this keeps those and drops the prose.

    python tools/extract_crd_schema.py                      # every schema below
    python tools/extract_crd_schema.py tests/data/upstream/crd/mpijobs-v2beta1.yaml   # the MPIJob's alone

ClusterTrainingRuntime and TrainingRuntime share one schema (the two CRDs differ only in scope):
the extraction refuses to write it when they disagree.
"""
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
KEEP = {
    "type", "properties", "additionalProperties", "items", "enum", "required", "anyOf",
    "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields", "format", "default",
}
MPIJOB_CRD = "tests/data/upstream/crd/mpijobs-v2beta1.yaml"
# (output, version, the CRDs it is extracted from: all must give the same schema)
SCHEMAS = (
    ("policies/mpijob/schema/mpijob-v2beta1.json", "v2beta1", (MPIJOB_CRD,)),
    ("policies/trainer/schema/trainjob-v1alpha1.json", "v1alpha1",
     ("tests/data/trainer/crds/trainer.kubeflow.org_trainjobs.yaml",)),
    ("policies/trainer/schema/trainingruntime-v1alpha1.json", "v1alpha1",
     ("tests/data/trainer/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml",
      "tests/data/trainer/crds/trainer.kubeflow.org_trainingruntimes.yaml")),
)


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


def extracted(crd_path: Path, version_name: str) -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(crd_path.read_text(), Loader=loader)  # noqa: S506 - a safe loader
    version = next(v for v in crd["spec"]["versions"] if v["name"] == version_name)
    return strip(version["schema"]["openAPIV3Schema"])


def text(schema: dict) -> str:
    return json.dumps(schema, separators=(",", ":"), sort_keys=True) + "\n"


def write(output: str, version: str, crds: tuple[str, ...]) -> None:
    schemas = [extracted(ROOT / crd, version) for crd in crds]
    if any(schema != schemas[0] for schema in schemas[1:]):
        raise SystemExit(f"{', '.join(crds)} do not share one schema: {output} not written")
    out = ROOT / output
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text(schemas[0]))
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def main(args: list[str]) -> None:
    wanted = [s for s in SCHEMAS if not args or any(Path(a).resolve() == (ROOT / c).resolve()
                                                      for a in args for c in s[2])]
    if not wanted:
        raise SystemExit(f"no schema is extracted from {', '.join(args)}")
    for output, version, crds in wanted:
        write(output, version, crds)


if __name__ == "__main__":
    main(sys.argv[1:])
