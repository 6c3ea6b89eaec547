"""Conversion between the MPIJob apiVersions: v2beta1 (the hub) and v1alpha1, v1alpha2, v1.

Pure functions over plain dicts, like the rest of ``policies``; the ConversionReview envelope
lives in ``webhook``. Start with ``convert`` and ``SERVED_VERSIONS``.
"""
from __future__ import annotations

from policies.conversion.spoke import DEFAULT_GPUS_PER_NODE, DEFAULT_OPTIONS, ConversionOptions
from policies.conversion.hub import (
    SERVED_VERSIONS,
    SPOKES,
    Conversion,
    ConversionError,
    advisory,
    check_desired,
    convert,
    source_version,
    to_hub,
)
from policies.conversion.notes import PROBLEMS_ANNOTATION, Note, Severity
from policies.conversion.stash import STASH_ANNOTATION

__all__ = [
    "DEFAULT_GPUS_PER_NODE", "DEFAULT_OPTIONS", "PROBLEMS_ANNOTATION", "SERVED_VERSIONS", "SPOKES",
    "STASH_ANNOTATION", "Conversion", "ConversionError", "ConversionOptions", "Note", "Severity",
    "advisory", "check_desired", "convert", "source_version", "to_hub",
]
