"""The policy file's YAML, read with bounds (size, depth, one document, no duplicate keys) and the
line of every key, so problems can name where they are."""
from __future__ import annotations

from typing import Any

import yaml

from policies.config.problems import PolicyError, PolicyProblem, _child, _item

MAX_POLICY_BYTES = 1024 * 1024  # a ConfigMap cannot hold more
_MAX_DEPTH = 32


def _read_yaml(text: str, source: str) -> tuple[Any, dict[str, int]]:
    """The single YAML document of ``text`` and the line of every key. Duplicate keys are errors
    (PyYAML would silently keep the last one, hiding a second ``rules:`` section), and so is
    nesting deep enough to be a self-referencing alias."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_POLICY_BYTES:
        raise PolicyError([PolicyProblem("", f"the file is larger than {MAX_POLICY_BYTES} bytes")], source)
    lines: dict[str, int] = {}
    structural: list[PolicyProblem] = []
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        data = None if node is None else _construct(loader, node, "", lines, structural, 0)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        detail = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise PolicyError([PolicyProblem("", f"not valid YAML: {detail}", mark.line + 1 if mark else None)],
                          source) from None
    except yaml.YAMLError as exc:
        raise PolicyError([PolicyProblem("", f"not valid YAML: {exc}")], source) from None
    finally:
        if loader is not None:
            loader.dispose()
    if structural:
        raise PolicyError(structural, source)
    return data, lines


def _construct(loader: yaml.SafeLoader, node: yaml.Node, path: str, lines: dict[str, int],
               structural: list[PolicyProblem], depth: int) -> Any:
    if depth > _MAX_DEPTH:
        structural.append(PolicyProblem(path, f"nested deeper than {_MAX_DEPTH} levels", node.start_mark.line + 1))
        return None
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            key_path = _child(path, key)
            if not isinstance(key, str):
                key = str(key)
            if key in result:
                structural.append(PolicyProblem(key_path, "duplicate key: each key may appear once",
                                                key_node.start_mark.line + 1))
            lines.setdefault(key_path, key_node.start_mark.line + 1)
            result[key] = _construct(loader, value_node, key_path, lines, structural, depth + 1)
        return result
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            lines.setdefault(_item(path, index), item.start_mark.line + 1)
            items.append(_construct(loader, item, _item(path, index), lines, structural, depth + 1))
        return items
    return loader.construct_object(node, deep=True)
