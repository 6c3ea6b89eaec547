"""The policy file: YAML in, ``Policy`` out, and the JSON Schema that describes it.

Nothing here is written by hand per rule. The accepted rule and mutation ids, their
parameters, the parameters' types and defaults all come from the registry (each rule's
``Params`` dataclass), so a new rule is configurable the moment it is registered.

A parameter is written in camelCase in the file (``maxPerWorker`` for the Params field
``max_per_worker``). A Params dataclass may validate itself in ``__post_init__`` (raise
``ValueError``, e.g. for a ``min`` above its ``max``); the message is reported at the
parameters' field path.

Every problem names its field path (``rules.worker-count.params.max``) and line, and an
unknown name comes with a "did you mean". Loading is all or nothing: a file with any problem
yields no policy at all.

File shape (every key optional; no file, an empty file → the built-in defaults)::

    apiVersion: mpijob-webhook/v1
    kind: Policy
    clusterUnavailable: warn            # warn | deny
    exemptNamespaces: [kube-system, mpijob-webhook, "openshift-*"]
    rules:
      worker-count: {action: deny, params: {max: 64}}
      image-reference: warn             # shorthand for {action: warn}
    mutations:
      istio-sidecar-off: {enabled: true}
      kueue-queue-label: false          # shorthand for {enabled: false}
    overrides:
      - name: research
        namespaceSelector: {matchLabels: {team: research}}
        rules: {gpus-per-worker: {params: {max: 16}}}
      - name: sandbox
        namespaces: [sandbox, "dev-*"]
        exempt: true
"""
from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any

import yaml

from policies.base import Action, Mutation, Rule
from policies.hints import did_you_mean
from policies.policy import (
    DEFAULT_WEBHOOK_NAMESPACE,
    MutationPatch,
    Override,
    Policy,
    RulePatch,
    SettingsPatch,
)
from policies.selector import OPERATORS, LabelSelector, Requirement
from policies.settings import Settings

API_VERSION = "mpijob-webhook/v1"
KIND = "Policy"
SCHEMA_ID = "https://github.com/mpijob-webhook/mpijob-webhook/policy.schema.json"
MAX_POLICY_BYTES = 1024 * 1024  # a ConfigMap cannot hold more
CLUSTER_UNAVAILABLE_ACTIONS = (Action.WARN, Action.DENY)
_MAX_DEPTH = 32
_NAMESPACE_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$|^[a-z0-9][-a-z0-9]*\*$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


# --- problems -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PolicyProblem:
    path: str  # rules.worker-count.params.max ("" for the whole document)
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.path or '(document)'}: {self.message}"


class PolicyError(ValueError):
    """The policy file cannot be used; ``problems`` says every reason, with field paths."""

    def __init__(self, problems: Sequence[PolicyProblem], source: str = "policy file") -> None:
        self.problems = tuple(problems)
        self.source = source
        super().__init__(self.summary())

    def summary(self) -> str:
        listed = "\n".join(f"  {p}" for p in self.problems)
        count = len(self.problems)
        return f"{self.source} is invalid ({count} problem{'s' if count != 1 else ''}):\n{listed}"

    def first_line(self) -> str:
        """One line for logs, metrics details and /readyz."""
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return f"{self.source}: {self.problems[0]}{more}"


class _Problems:
    """Collects problems while the document is read, so all are reported at once."""

    def __init__(self, lines: Mapping[str, int]) -> None:
        self.lines = lines
        self.found: list[PolicyProblem] = []

    def add(self, path: str, message: str) -> None:
        self.found.append(PolicyProblem(path, message, self._line(path)))

    def _line(self, path: str) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = _parent(path)
        return None


def _child(path: str, key: Any) -> str:
    text = str(key)
    if re.fullmatch(r"[A-Za-z0-9_-]+", text):
        return f"{path}.{text}" if path else text
    return f"{path}[{text}]"


def _item(path: str, index: int) -> str:
    return f"{path}[{index}]"


def _parent(path: str) -> str:
    match = re.search(r"(\.[A-Za-z0-9_-]+|\[[^\]]*\])$", path)
    return path[: match.start()] if match else ""


# --- YAML with line numbers -----------------------------------------------------------------
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


# --- parameters: from Params dataclass fields -----------------------------------------------
def yaml_name(field_name: str) -> str:
    """``max_per_worker`` → ``maxPerWorker``: Kubernetes-style keys in the file."""
    head, *rest = field_name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _type_hints(params_type: type) -> dict[str, Any]:
    return typing.get_type_hints(params_type)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


_SEQUENCES = (tuple, list, frozenset, set, Sequence, typing.Sequence, Iterable)
_MAPPINGS = (dict, Mapping, typing.Mapping)


def _describe_type(tp: Any) -> str:
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp in (float, Decimal):
        return "a number"
    if tp is str:
        return "a string"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "one of " + ", ".join(str(m.value) for m in tp)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if _is_union(tp):
        return " or ".join(_describe_type(a) for a in typing.get_args(tp) if a is not type(None))
    if origin in _SEQUENCES:
        return "a list"
    if origin in _MAPPINGS or dataclasses.is_dataclass(tp):
        return "a mapping"
    return "a value"


def _convert(tp: Any, value: Any, path: str, problems: _Problems) -> Any:
    """``value`` from YAML as type ``tp``; on a mismatch, a problem at ``path`` (and None)."""
    if tp is Any:
        return _freeze(value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        if value is None and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            trial = _Problems(problems.lines)
            converted = _convert(option, value, path, trial)
            if not trial.found:
                return converted
        return _mismatch(tp, value, path, problems)
    if origin is typing.Literal:
        if value in args:
            return value
        problems.add(path, f"unsupported value {_show(value)}: must be one of {', '.join(map(str, args))}"
                     f"{did_you_mean(str(value), map(str, args))}")
        return None
    if isinstance(tp, type) and issubclass(tp, Enum):
        values = [m.value for m in tp]
        if value in values:
            return tp(value)
        problems.add(path, f"unsupported value {_show(value)}: must be one of {', '.join(map(str, values))}"
                     f"{did_you_mean(str(value), map(str, values))}")
        return None
    if tp is bool:
        return value if isinstance(value, bool) else _mismatch(tp, value, path, problems)
    if tp is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _mismatch(tp, value, path, problems)
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok else _mismatch(tp, value, path, problems)
    if tp is Decimal:
        ok = isinstance(value, (int, float, str)) and not isinstance(value, bool)
        try:
            return Decimal(str(value)) if ok else _mismatch(tp, value, path, problems)
        except ArithmeticError:
            return _mismatch(tp, value, path, problems)
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            problems.add(path, f"must be a string, not the number {value}; quote it: \"{value}\"")
            return None
        return _mismatch(tp, value, path, problems)
    if origin in _SEQUENCES:
        if not isinstance(value, list):
            return _mismatch(tp, value, path, problems)
        if origin is tuple and args and args[-1] is not Ellipsis:  # fixed-length tuple
            if len(value) != len(args):
                problems.add(path, f"must be a list of exactly {len(args)} items, not {len(value)}")
                return None
            return tuple(_convert(t, v, _item(path, i), problems) for i, (t, v) in enumerate(zip(args, value)))
        item_type = args[0] if args else Any
        items = [_convert(item_type, v, _item(path, i), problems) for i, v in enumerate(value)]
        return frozenset(items) if origin in (frozenset, set) else tuple(items)
    if origin in _MAPPINGS:
        if not isinstance(value, Mapping):
            return _mismatch(tp, value, path, problems)
        key_type, value_type = args if args else (str, Any)
        return {_convert(key_type, k, _child(path, k), problems): _convert(value_type, v, _child(path, k), problems)
                for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            return _mismatch(tp, value, path, problems)
        fields = _params_fields(tp, value, path, problems)
        return _construct_params(tp, fields, path, problems)
    raise TypeError(f"{path}: parameter type {tp!r} cannot be read from a policy file")


def _mismatch(tp: Any, value: Any, path: str, problems: _Problems) -> None:
    problems.add(path, f"must be {_describe_type(tp)}, not {_kind_of(value)} {_show(value)}")
    return None


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "the boolean"
    if isinstance(value, (int, float)):
        return "the number"
    if isinstance(value, str):
        return "the string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__


def _show(value: Any) -> str:
    if isinstance(value, (list, Mapping)):
        return ""
    text = repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _freeze(v) for k, v in value.items()}
    return value


def _params_fields(params_type: type, value: Mapping[str, Any], path: str, problems: _Problems) -> dict[str, Any]:
    """The fields given in the file, by Python name, converted to their declared types."""
    hints = _type_hints(params_type)
    by_yaml = {yaml_name(f.name): f for f in dataclasses.fields(params_type) if f.init}
    given: dict[str, Any] = {}
    for key, item in value.items():
        field_path = _child(path, key)
        target = by_yaml.get(key)
        if target is None:
            known = ", ".join(by_yaml) or "none"
            problems.add(field_path, f"unknown parameter {key!r}{did_you_mean(key, by_yaml)} (parameters: {known})")
            continue
        given[target.name] = _convert(hints[target.name], item, field_path, problems)
    return given


def _construct_params(params_type: type, fields: Mapping[str, Any], path: str, problems: _Problems,
                      base: Any = None) -> Any:
    try:
        params = dataclasses.replace(base, **fields) if base is not None else params_type(**fields)
    except (TypeError, ValueError) as exc:
        problems.add(path, str(exc))
        return None
    for low, high in _ranges(params):
        if getattr(params, low) > getattr(params, high):
            problems.add(path, f"{yaml_name(low)} ({getattr(params, low)}) is above {yaml_name(high)} "
                               f"({getattr(params, high)}): nothing could pass; lower {yaml_name(low)} "
                               f"or raise {yaml_name(high)}")
            return None
    return params


def _ranges(params: Any) -> Iterator[tuple[str, str]]:
    """Field pairs that form a range by name: ``min``/``max``, ``min_<x>``/``max_<x>``."""
    names = {f.name for f in dataclasses.fields(params)}
    for name in sorted(names):
        if name == "min" or name.startswith("min_"):
            high = "max" + name[3:]
            numbers = (int, float, Decimal)
            if high in names and all(isinstance(getattr(params, n), numbers) and not isinstance(getattr(params, n), bool)
                                     for n in (name, high)):
                yield name, high


# --- the document ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Registry:
    rules: Mapping[str, Rule]
    mutations: Mapping[str, Mutation]


def _registry(rules: Sequence[Rule] | None, mutations: Sequence[Mutation] | None) -> _Registry:
    from policies.registry import MUTATIONS, RULES

    return _Registry({r.id: r for r in (RULES if rules is None else rules)},
                     {m.id: m for m in (MUTATIONS if mutations is None else mutations)})


def default_policy(own_namespace: str | None = None, *, rules: Sequence[Rule] | None = None,
                   mutations: Sequence[Mutation] | None = None) -> Policy:
    """The built-in policy: every rule at its default action, nothing overridden."""
    registry = _registry(rules, mutations)
    return Policy(settings=_defaults(registry), exempt_namespaces=_default_exempt(own_namespace))


def _default_exempt(own_namespace: str | None) -> frozenset[str]:
    return frozenset({"kube-system", own_namespace or DEFAULT_WEBHOOK_NAMESPACE})


def _defaults(registry: _Registry) -> Settings:
    return Settings.defaults(tuple(registry.rules.values()), tuple(registry.mutations.values()))


def parse_policy(text: str, *, source: str = "policy file", own_namespace: str | None = None,
                 rules: Sequence[Rule] | None = None, mutations: Sequence[Mutation] | None = None) -> Policy:
    """The policy written in ``text`` (YAML). Raises PolicyError listing every problem."""
    data, lines = _read_yaml(text, source)
    return policy_from_document(data, source=source, own_namespace=own_namespace, rules=rules,
                                mutations=mutations, lines=lines)


def policy_from_document(data: Any, *, source: str = "policy file", own_namespace: str | None = None,
                         rules: Sequence[Rule] | None = None, mutations: Sequence[Mutation] | None = None,
                         lines: Mapping[str, int] | None = None) -> Policy:
    registry = _registry(rules, mutations)
    problems = _Problems(lines or {})
    base = _defaults(registry)
    if data is None:
        return Policy(settings=base, exempt_namespaces=_default_exempt(own_namespace))
    if not isinstance(data, Mapping):
        raise PolicyError([PolicyProblem("", f"must be a mapping of policy settings, not {_kind_of(data)}")], source)
    reader = _Reader(registry, problems, base)
    _check_keys(data, "", _TOP_LEVEL_KEYS, problems)
    if "apiVersion" in data and data["apiVersion"] != API_VERSION:
        problems.add("apiVersion", f"unsupported value {_show(data['apiVersion'])}: must be {API_VERSION}")
    if "kind" in data and data["kind"] != KIND:
        problems.add("kind", f"unsupported value {_show(data['kind'])}: must be {KIND}")
    cluster_wide = reader.patch(data, "")
    settings = reader.apply(cluster_wide, base, "")
    exempt = _default_exempt(own_namespace)
    if "exemptNamespaces" in data:
        exempt = frozenset(_namespaces(data["exemptNamespaces"], "exemptNamespaces", problems, allow_empty=True))
        exempt |= {own_namespace} if own_namespace else frozenset()
    overrides = reader.overrides(data.get("overrides"), settings)
    if problems.found:
        raise PolicyError(sorted(problems.found, key=lambda p: p.line or 0), source)
    return Policy(settings=settings, exempt_namespaces=exempt, overrides=overrides)


_TOP_LEVEL_KEYS = ("apiVersion", "kind", "clusterUnavailable", "exemptNamespaces", "rules", "mutations", "overrides")
_OVERRIDE_KEYS = ("name", "namespaces", "namespaceSelector", "exempt", "clusterUnavailable", "rules", "mutations")


def _check_keys(value: Mapping[str, Any], path: str, known: Sequence[str], problems: _Problems) -> None:
    for key in value:
        if key not in known:
            where = path or "the top level"
            problems.add(_child(path, key), f"unknown field {key!r} at {where}{did_you_mean(str(key), known)}"
                                            f" (fields: {', '.join(known)})")


def _namespaces(value: Any, path: str, problems: _Problems, *, allow_empty: bool) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.add(path, "must be a list of namespace names (a trailing * matches by prefix: \"openshift-*\")")
        return []
    if not value and not allow_empty:
        problems.add(path, "must name at least one namespace")
    for index, name in enumerate(value):
        if not _NAMESPACE_PATTERN.match(name) or len(name) > 63:
            problems.add(_item(path, index), f"{name!r} is not a namespace name (lowercase letters, digits and '-', "
                                             "at most 63 characters; a trailing * matches by prefix)")
    return value


class _Reader:
    def __init__(self, registry: _Registry, problems: _Problems, base: Settings) -> None:
        self.registry = registry
        self.problems = problems
        self.base = base

    # A layer: clusterUnavailable, rules, mutations (top level or one override).
    def patch(self, data: Mapping[str, Any], path: str) -> SettingsPatch:
        return SettingsPatch(
            rules=self._entries(data.get("rules"), _child(path, "rules"), "rule", self.registry.rules, self._rule),
            mutations=self._entries(data.get("mutations"), _child(path, "mutations"), "mutation",
                                    self.registry.mutations, self._mutation),
            cluster_unavailable=self._cluster_unavailable(data, path),
        )

    def apply(self, patch: SettingsPatch, settings: Settings, path: str) -> Settings:
        """``patch`` over ``settings``; a Params ``__post_init__`` refusing the result is a problem."""
        for rule_id, rule in patch.rules.items():
            if self._params_accepted(settings, "rules", rule_id, rule.params, path):
                settings = settings.with_rule(rule_id, action=rule.action, **rule.params)
        for mutation_id, mutation in patch.mutations.items():
            if self._params_accepted(settings, "mutations", mutation_id, mutation.params, path):
                settings = settings.with_mutation(mutation_id, enabled=mutation.enabled, **mutation.params)
        if patch.cluster_unavailable is not None:
            settings = dataclasses.replace(settings, cluster_unavailable=patch.cluster_unavailable)
        return settings

    def _params_accepted(self, settings: Settings, section: str, ident: str, params: Mapping[str, Any],
                         path: str) -> bool:
        """Whether ``params`` over the current ones build a valid Params (problems recorded if not)."""
        current = settings.params(ident)
        return _construct_params(type(current), params, _child(_child(_child(path, section), ident), "params"),
                                 self.problems, base=current) is not None

    def _cluster_unavailable(self, data: Mapping[str, Any], path: str) -> Action | None:
        if "clusterUnavailable" not in data:
            return None
        value = data["clusterUnavailable"]
        allowed = [a.value for a in CLUSTER_UNAVAILABLE_ACTIONS]
        if value not in allowed:
            self.problems.add(_child(path, "clusterUnavailable"),
                              f"unsupported value {_show(value)}: must be one of {', '.join(allowed)}"
                              f"{did_you_mean(str(value), allowed)}")
            return None
        return Action(value)

    def _entries(self, value: Any, path: str, noun: str, known: Mapping[str, Any],
                 read: Callable[[Any, Any, str], Any]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problems.add(path, f"must be a mapping of {noun} id to its settings, not {_kind_of(value)}")
            return {}
        entries = {}
        for ident, entry in value.items():
            entry_path = _child(path, ident)
            if ident not in known:
                self.problems.add(entry_path, f"unknown {noun} id {ident!r}{did_you_mean(str(ident), known)} "
                                              f"(known {noun}s: {', '.join(known) or 'none'})")
                continue
            patch = read(known[ident], entry, entry_path)
            if patch is not None:
                entries[ident] = patch
        return entries

    def _rule(self, rule: Rule, entry: Any, path: str) -> RulePatch | None:
        if isinstance(entry, str):  # shorthand: worker-count: warn
            entry = {"action": entry}
        if not isinstance(entry, Mapping):
            self.problems.add(path, f"must be an action ({', '.join(a.value for a in Action)}) "
                                    "or a mapping with action and params")
            return None
        _check_keys(entry, path, ("action", "params"), self.problems)
        action = None
        if "action" in entry:
            action = _convert(Action, entry["action"], _child(path, "action"), self.problems)
        return RulePatch(action, self._params(rule.Params, entry.get("params"), _child(path, "params")))

    def _mutation(self, mutation: Mutation, entry: Any, path: str) -> MutationPatch | None:
        if isinstance(entry, bool):  # shorthand: istio-sidecar-off: false
            entry = {"enabled": entry}
        if not isinstance(entry, Mapping):
            self.problems.add(path, "must be true, false or a mapping with enabled and params")
            return None
        _check_keys(entry, path, ("enabled", "params"), self.problems)
        enabled = None
        if "enabled" in entry:
            enabled = _convert(bool, entry["enabled"], _child(path, "enabled"), self.problems)
        return MutationPatch(enabled, self._params(mutation.Params, entry.get("params"), _child(path, "params")))

    def _params(self, params_type: type, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problems.add(path, f"must be a mapping of parameter name to value, not {_kind_of(value)}")
            return {}
        given = _params_fields(params_type, value, path, self.problems)
        return {k: v for k, v in given.items() if v is not None or _accepts_none(params_type, k)}

    def overrides(self, value: Any, cluster_wide: Settings) -> tuple[Override, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            self.problems.add("overrides", f"must be a list of overrides, not {_kind_of(value)}")
            return ()
        overrides = []
        for index, entry in enumerate(value):
            override = self._override(entry, _item("overrides", index), cluster_wide)
            if override is not None:
                overrides.append(override)
        return tuple(overrides)

    def _override(self, entry: Any, path: str, cluster_wide: Settings) -> Override | None:
        if not isinstance(entry, Mapping):
            self.problems.add(path, "must be a mapping with namespaces or namespaceSelector")
            return None
        _check_keys(entry, path, _OVERRIDE_KEYS, self.problems)
        name = entry.get("name", path)
        if not isinstance(name, str):
            self.problems.add(_child(path, "name"), "must be a string")
            name = path
        has_names, has_selector = "namespaces" in entry, "namespaceSelector" in entry
        if has_names == has_selector:
            self.problems.add(path, "must have exactly one of namespaces (by name) or namespaceSelector (by label)")
            return None
        exempt = entry.get("exempt", False)
        if not isinstance(exempt, bool):
            self.problems.add(_child(path, "exempt"), f"must be true or false, not {_kind_of(exempt)} {_show(exempt)}")
        patch = self.patch(entry, path)
        self.apply(patch, cluster_wide, path)  # report what the Params refuse, against the cluster-wide values
        if has_names:
            names = _namespaces(entry["namespaces"], _child(path, "namespaces"), self.problems, allow_empty=False)
            return Override(name, namespaces=frozenset(names), patch=patch, exempt=exempt is True)
        selector = _selector(entry["namespaceSelector"], _child(path, "namespaceSelector"), self.problems)
        return Override(name, selector=selector, patch=patch, exempt=exempt is True)


def _accepts_none(params_type: type, field_name: str) -> bool:
    tp = _type_hints(params_type)[field_name]
    return _is_union(tp) and type(None) in typing.get_args(tp)


def _selector(value: Any, path: str, problems: _Problems) -> LabelSelector:
    if not isinstance(value, Mapping):
        problems.add(path, "must be a label selector: a mapping with matchLabels and/or matchExpressions")
        return LabelSelector()
    _check_keys(value, path, ("matchLabels", "matchExpressions"), problems)
    labels: list[tuple[str, str]] = []
    match_labels = value.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        problems.add(_child(path, "matchLabels"), "must be a mapping of label key to value")
        match_labels = {}
    for key, label in match_labels.items():
        label_path = _child(_child(path, "matchLabels"), key)
        _label_key(key, label_path, problems)
        if not isinstance(label, str):
            problems.add(label_path, f"label values are strings: quote it (\"{_show(label)}\")")
        elif not _LABEL_VALUE.match(label) or len(label) > 63:
            problems.add(label_path, f"{label!r} is not a valid label value")
        else:
            labels.append((key, label))
    expressions = value.get("matchExpressions") or []
    requirements = []
    if not isinstance(expressions, list):
        problems.add(_child(path, "matchExpressions"), "must be a list of {key, operator, values}")
        expressions = []
    for index, expression in enumerate(expressions):
        requirement = _requirement(expression, _item(_child(path, "matchExpressions"), index), problems)
        if requirement is not None:
            requirements.append(requirement)
    return LabelSelector(tuple(labels), tuple(requirements))


def _label_key(key: str, path: str, problems: _Problems) -> None:
    if not _LABEL_KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        problems.add(path, f"{key!r} is not a valid label key")


def _requirement(value: Any, path: str, problems: _Problems) -> Requirement | None:
    if not isinstance(value, Mapping):
        problems.add(path, "must be a mapping with key, operator and values")
        return None
    _check_keys(value, path, ("key", "operator", "values"), problems)
    key, operator, values = value.get("key"), value.get("operator"), value.get("values")
    if not isinstance(key, str):
        problems.add(_child(path, "key"), "is required: the label key to test")
        return None
    _label_key(key, _child(path, "key"), problems)
    if operator not in OPERATORS:
        problems.add(_child(path, "operator"), f"unsupported value {_show(operator)}: must be one of "
                                               f"{', '.join(OPERATORS)}{did_you_mean(str(operator), OPERATORS)}")
        return None
    if operator in ("In", "NotIn"):
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            problems.add(_child(path, "values"), f"{operator} needs a non-empty list of string values")
            return None
    elif values:
        problems.add(_child(path, "values"), f"{operator} takes no values")
        return None
    return Requirement(key, operator, frozenset(values or ()))


# --- JSON Schema ----------------------------------------------------------------------------
def json_schema(rules: Sequence[Rule] | None = None, mutations: Sequence[Mutation] | None = None) -> dict[str, Any]:
    """The policy file's JSON Schema (draft 2020-12), generated from the registry; for editors
    (yaml-language-server) and CI linters. The loader checks the same and more."""
    registry = _registry(rules, mutations)
    layer = {
        "clusterUnavailable": {"$ref": "#/$defs/clusterUnavailable"},
        "rules": {"$ref": "#/$defs/rules"},
        "mutations": {"$ref": "#/$defs/mutations"},
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "mpijob-webhook policy",
        "description": "Per rule an action and parameters, per mutation on/off and parameters, exempt "
                       "namespaces and per-namespace overrides. Precedence: built-in defaults < this "
                       "file's cluster-wide settings < namespaceSelector overrides (in file order) < "
                       "namespaces overrides (in file order); an exempt namespace is never checked.",
        "type": ["object", "null"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": KIND},
            **layer,
            "exemptNamespaces": {
                "description": "Namespaces never checked (replaces the default: kube-system and the "
                               "webhook's own namespace, which is always exempt).",
                "$ref": "#/$defs/namespaceList",
                "default": sorted(_default_exempt(None)),
            },
            "overrides": {"type": "array", "items": {"$ref": "#/$defs/override"}},
        },
        "$defs": {
            "clusterUnavailable": {
                "description": "What happens to cluster-aware rules while cluster state is unavailable: "
                               "warn admits with a warning, deny refuses (fail closed).",
                "enum": [a.value for a in CLUSTER_UNAVAILABLE_ACTIONS],
                "default": Settings.cluster_unavailable.value,
            },
            "action": {"enum": [a.value for a in Action]},
            "namespaceList": {
                "type": "array",
                "items": {"type": "string", "maxLength": 63, "pattern": _NAMESPACE_PATTERN.pattern},
            },
            "rules": {
                "type": "object",
                "additionalProperties": False,
                "properties": {r.id: _rule_schema(r) for r in registry.rules.values()},
            },
            "mutations": {
                "type": "object",
                "additionalProperties": False,
                "properties": {m.id: _mutation_schema(m) for m in registry.mutations.values()},
            },
            "override": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string"},
                    "namespaces": {"$ref": "#/$defs/namespaceList", "minItems": 1},
                    "namespaceSelector": {"$ref": "#/$defs/labelSelector"},
                    "exempt": {"type": "boolean", "default": False},
                    **layer,
                },
                "oneOf": [{"required": ["namespaces"]}, {"required": ["namespaceSelector"]}],
            },
            "labelSelector": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "matchExpressions": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["key", "operator"],
                            "properties": {
                                "key": {"type": "string"},
                                "operator": {"enum": list(OPERATORS)},
                                "values": {"type": "array", "items": {"type": "string"}},
                            },
                        },
                    },
                },
            },
        },
    }


def _doc(item: Any) -> str:
    """The first paragraph of the rule's docstring, else of its module's."""
    text = type(item).__doc__ or getattr(sys.modules.get(type(item).__module__), "__doc__", None) or ""
    return " ".join(text.strip().split("\n\n")[0].split())


def _field_comments(params_type: type) -> dict[str, str]:
    """The ``# comments`` written above (or beside) each Params field: its documentation."""
    try:
        source = inspect.getsource(params_type)
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in source.splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        declared = re.match(r"(\w+)\s*:[^#]*(#\s*(.*))?$", stripped)
        if declared and not stripped.startswith(("def ", "@", "return")):
            text = " ".join([*pending, declared.group(3) or ""]).strip()
            if text:
                comments[declared.group(1)] = text
        pending = []
    return comments


def _rule_schema(rule: Rule) -> dict[str, Any]:
    full = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "action": {"$ref": "#/$defs/action", "default": rule.default_action.value},
            "params": _params_schema(rule.Params),
        },
    }
    return {"description": _doc(rule), "oneOf": [{"$ref": "#/$defs/action"}, full]}


def _mutation_schema(mutation: Mutation) -> dict[str, Any]:
    full = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "enabled": {"type": "boolean", "default": mutation.enabled_by_default},
            "params": _params_schema(mutation.Params),
        },
    }
    return {"description": _doc(mutation), "oneOf": [{"type": "boolean"}, full]}


def _params_schema(params_type: type) -> dict[str, Any]:
    hints = _type_hints(params_type)
    defaults = params_type()
    comments = _field_comments(params_type)
    properties = {}
    for f in dataclasses.fields(params_type):
        if not f.init:
            continue
        schema = _type_schema(hints[f.name])
        doc = (f.metadata.get("doc") if f.metadata else None) or comments.get(f.name)
        if doc:
            schema = {"description": doc, **schema}
        properties[yaml_name(f.name)] = {**schema, "default": to_plain(getattr(defaults, f.name))}
    return {"type": "object", "additionalProperties": False, "properties": properties}


def _type_schema(tp: Any) -> dict[str, Any]:
    if tp is Any:
        return {}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        options = [_type_schema(a) if a is not type(None) else {"type": "null"} for a in args]
        return {"anyOf": options}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if isinstance(tp, type) and issubclass(tp, Enum):
        return {"enum": [m.value for m in tp]}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if tp in simple:
        return {"type": simple[tp]}
    if tp is Decimal:
        return {"type": ["number", "string"]}
    if origin in _SEQUENCES:
        if origin is tuple and args and args[-1] is not Ellipsis:
            return {"type": "array", "prefixItems": [_type_schema(a) for a in args],
                    "minItems": len(args), "maxItems": len(args)}
        schema: dict[str, Any] = {"type": "array", "items": _type_schema(args[0]) if args else {}}
        if origin in (frozenset, set):
            schema["uniqueItems"] = True
        return schema
    if origin in _MAPPINGS:
        return {"type": "object", "additionalProperties": _type_schema(args[1]) if args else {}}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _params_schema(tp)
    raise TypeError(f"parameter type {tp!r} cannot be written in a policy file")


def to_plain(value: Any) -> Any:
    """A parameter value as JSON/YAML writes it (for schema defaults and ``policy defaults``)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else str(value)
    if isinstance(value, (frozenset, set)):
        return sorted(to_plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {yaml_name(f.name): to_plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    return value


def defaults_document(own_namespace: str | None = None, *, rules: Sequence[Rule] | None = None,
                      mutations: Sequence[Mutation] | None = None) -> dict[str, Any]:
    """The built-in policy written out in full: a starting point for a policy file."""
    registry = _registry(rules, mutations)
    settings = _defaults(registry)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "clusterUnavailable": settings.cluster_unavailable.value,
        "exemptNamespaces": sorted(_default_exempt(own_namespace)),
        "rules": {rule_id: {"action": config.action.value, "params": to_plain(config.params)}
                  for rule_id, config in settings.rules.items()},
        "mutations": {mutation_id: {"enabled": config.enabled, "params": to_plain(config.params)}
                      for mutation_id, config in settings.mutations.items()},
        "overrides": [],
    }
