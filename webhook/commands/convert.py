"""``mpijob-webhook convert``: MPIJob manifests from one apiVersion to another, offline.

The same converters as the conversion webhook. The output is clean YAML for the target version:
the annotations the webhook keeps on stored objects (the conversion data that makes round trips
lossless, and the record of problems) are left out unless ``--keep-conversion-data``. What no
conversion can fix is explained on stderr.

Exit status: 0 converted, nothing to do; 1 converted, but something needs attention (a job the
old operator refused, an image that must run sshd, fields the target cannot hold); 2 an input
could not be read or is not an MPIJob of a known version (nothing is printed).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from policies.conversion import (
    DEFAULT_GPUS_PER_NODE,
    PROBLEMS_ANNOTATION,
    SERVED_VERSIONS,
    STASH_ANNOTATION,
    Conversion,
    ConversionError,
    ConversionOptions,
    Note,
    Severity,
    advisory,
    convert,
)
from policies.conversion.tree import display
from policies.mpijob.reading import GROUP, HUB_API_VERSION, KIND
from webhook import plain_yaml
from webhook.commands.check import label, read
from webhook.offline import BadInput, documents


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "convert", help="convert MPIJob manifests between apiVersions (e.g. v1alpha1 to v2beta1)",
        description="Convert MPIJob manifests (multi-document YAML; - for stdin) to another apiVersion with the "
                    "conversion webhook's converters and print them; other objects are printed unchanged. "
                    "Explains on stderr what needs attention. Exit 0: converted; 1: something needs "
                    "attention; 2: bad input.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="manifest files, or - for stdin")
    parser.add_argument("--to", default=HUB_API_VERSION, type=_version, metavar="VERSION",
                        help=f"target apiVersion: {', '.join(SERVED_VERSIONS)} (default %(default)s)")
    parser.add_argument("--gpus-per-node", type=_positive, default=DEFAULT_GPUS_PER_NODE, metavar="N",
                        help="GPUs (processing units) per node for v1alpha1 jobs sized by gpus or processingUnits "
                             "that do not say (default %(default)s, as the v1alpha1 operator's manifest)")
    parser.add_argument("--keep-conversion-data", action="store_true",
                        help=f"keep the {STASH_ANNOTATION} and {PROBLEMS_ANNOTATION} annotations, as the "
                             "webhook stores them (for a later conversion back without loss)")
    parser.set_defaults(run=run)


def _version(value: str) -> str:
    version = value if "/" in value else f"{GROUP}/{value}"
    if version not in SERVED_VERSIONS:
        raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(SERVED_VERSIONS)}")
    return version


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive whole number")
    return number


@dataclass(frozen=True)
class Converted:
    where: str  # file[document]
    obj: dict[str, Any]
    source: str = ""  # apiVersion before; "" for objects that are not MPIJobs
    conversion: Conversion | None = None


def run(args: argparse.Namespace) -> int:
    options = ConversionOptions(gpus_per_node=args.gpus_per_node)
    converted: list[Converted] = []
    errors: list[str] = []
    for name in args.files:
        try:
            converted.extend(_convert_file(name, args.to, options))
        except BadInput as error:
            where = f"{error.source}[{error.document}]" if error.document is not None else error.source
            errors.append(f"{where}: {error.message}")
    if errors:
        for message in errors:
            print(f"error: {message}", file=sys.stderr)
        return 2
    attention = False
    for item in converted:
        lines = list(_report(item, args.to, args.keep_conversion_data))
        attention |= len(lines) > 1
        for line in lines:
            print(line, file=sys.stderr)
    outputs = [item.obj if args.keep_conversion_data else _clean(item.obj) for item in converted]
    plain_yaml.dump_all(outputs, sys.stdout)
    return 1 if attention else 0


def _convert_file(name: str, target: str, options: ConversionOptions) -> Iterator[Converted]:
    source = label(name)
    for index, obj in documents(read(name), source):
        where = f"{source}[{index}]"
        if obj.get("kind") != KIND or not str(obj.get("apiVersion")).startswith(f"{GROUP}/"):
            yield Converted(where, obj)
            continue
        try:
            conversion = convert(obj, target, options)
        except ConversionError as exc:
            raise BadInput(source, str(exc), index) from None
        yield Converted(where, conversion.obj, obj["apiVersion"], conversion)


def _report(item: Converted, target: str, keep: bool) -> Iterator[str]:
    metadata = item.obj.get("metadata") or {}
    name = "/".join(str(p) for p in (metadata.get("namespace"), metadata.get("name")) if p) or "(unnamed)"
    if item.conversion is None:
        yield f"{item.where} {item.obj.get('apiVersion')} {item.obj.get('kind')} {name}: not an MPIJob, unchanged"
        return
    if item.source == target:
        yield f"{item.where} MPIJob {name}: already {target}, unchanged"
        return
    yield f"{item.where} MPIJob {name}: {item.source} -> {target}"
    for note in item.conversion.notes:
        yield _note_line(note)
    if advisory(item.source) and target != item.source:
        yield f"  attention: {advisory(item.source)}"
    dropped = [display(path) for path in item.conversion.dropped]
    if dropped:
        shown = ", ".join(dropped)  # every one: the reader decides what losing each means
        kept = (f"kept in the {STASH_ANNOTATION} annotation" if keep
                else "dropped (--keep-conversion-data keeps them in an annotation)")
        yield f"  attention: {target} cannot hold {shown}: {kept}"


def _note_line(note: Note) -> str:
    if note.severity is Severity.PROBLEM:
        return f"  problem: {note.line()} (converted anyway; fix it before applying)"
    return f"  {note.severity.value}: {note.line()}"


def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    """Without the annotations only the webhook's stored objects need."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(metadata, dict) or not isinstance(annotations, dict) or \
            not ({STASH_ANNOTATION, PROBLEMS_ANNOTATION} & annotations.keys()):
        return obj
    kept = {k: v for k, v in annotations.items() if k not in (STASH_ANNOTATION, PROBLEMS_ANNOTATION)}
    clean_metadata = {k: v for k, v in metadata.items() if k != "annotations"}
    if kept:
        clean_metadata["annotations"] = kept
    return {**obj, "metadata": clean_metadata}
