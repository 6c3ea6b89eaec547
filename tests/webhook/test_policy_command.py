"""``mpijob-webhook policy``: schema, defaults, validate and show."""
from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import yaml

from policies.config.reader import parse_policy
from policies.registry import MUTATION_IDS, RULE_IDS, default_settings
from tests.conftest import ROOT
from webhook.cli import main


def test_schema_prints_the_generated_json_schema(capsys):
    assert main(["policy", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert list(schema["$defs"]["rules"]["properties"]) == list(RULE_IDS)
    assert list(schema["$defs"]["mutations"]["properties"]) == list(MUTATION_IDS)


def parameters(schema: dict, where: str) -> Iterator[tuple[str, dict]]:
    """(path, schema) of every parameter under a ``params`` object, nested ones included."""
    for name, prop in schema.get("properties", {}).items():
        yield f"{where}.{name}", prop
        for option in (prop, prop.get("items", {}), *prop.get("anyOf", ())):
            yield from parameters(option, f"{where}.{name}")


def test_schema_describes_every_parameter_of_every_rule_and_mutation(capsys):
    assert main(["policy", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    found = {}
    for section in ("rules", "mutations"):
        for ident, entry in schema["$defs"][section]["properties"].items():
            [full] = [option for option in entry["oneOf"] if option.get("type") == "object"]
            found.update(parameters(full["properties"]["params"], f"{section}.{ident}"))
    assert {"rules.worker-count.min", "rules.worker-count.max", "rules.slots-per-worker.min",
            "rules.slots-per-worker.max", "rules.gpus-per-worker.max"} <= found.keys()
    assert sorted(path for path, prop in found.items() if not prop.get("description", "").strip()) == []


def test_defaults_prints_a_policy_file_that_reads_back_as_the_defaults(capsys):
    assert main(["policy", "defaults"]) == 0
    text = capsys.readouterr().out
    assert parse_policy(text).settings == default_settings()


def test_validate_exits_0_for_good_files_and_2_with_every_problem(tmp_path, capsys):
    good = ROOT / "examples" / "policy.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  worker-cont: warn\n  slots-per-worker: {params: {max: '8'}}\n")
    assert main(["policy", "validate", str(good)]) == 0
    assert capsys.readouterr().out.startswith(f"{good}: valid (sha256 ")
    assert main(["policy", "validate", str(good), str(bad)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"{bad} is invalid (2 problems):"
    assert err[1].startswith("  line 2: rules.worker-cont: unknown rule id 'worker-cont'; did you mean worker-count?")
    assert err[2] == "  line 3: rules.slots-per-worker.params.max: must be an integer, not the string '8'"


def test_show_prints_the_settings_in_force_in_a_namespace(capsys):
    example = str(ROOT / "examples" / "policy.yaml")
    assert main(["policy", "show", example, "--namespace", "mpi-ci", "--label", "team=research"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["overrides"] == ["gpu-research", "ci-smoke-tests"]
    assert shown["rules"]["worker-count"] == {"action": "deny", "params": {"min": 1, "max": 100}}
    assert shown["rules"]["gpus-per-worker"]["params"]["max"] == 16
    assert main(["policy", "show", example, "--namespace", "mpi-operator-e2e-7"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == {"namespace": "mpi-operator-e2e-7", "exempt": True,
                                                      "overrides": ["operator-e2e"]}
