"""The golden conversions of the upstream examples: every v1alpha1 / v1alpha2 / v1 example to
v2beta1, and every v2beta1 example to each older version.

Golden files hold the converted object without the conversion-data annotation (its edits are
opaque; the round-trip tests cover them). They are reviewed by hand against what the old
operators did; after changing a converter, rewrite them with

    python3 -m tests.conversion.golden_files --write

and read the diff before committing it.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from policies.conversion import convert
from tests.conversion.common import GOLDEN, HUB, SPOKES, older_upstream_jobs, upstream_jobs, without_stash


def cases() -> Iterator[tuple[str, dict[str, Any], str, Path]]:
    """(fixture name, job, target apiVersion, golden file) for every golden pair."""
    for name, job in older_upstream_jobs().items():
        yield name, job, HUB, golden_path(name, HUB)
    for name, job in upstream_jobs(HUB).items():
        for spoke in SPOKES:
            yield name, job, spoke, golden_path(name, spoke)


def golden_path(fixture: str, target: str) -> Path:
    folder, file = fixture.split("/")
    return GOLDEN / folder / f"{Path(file).stem}.to-{target.split('/')[1]}.yaml"


def render(job: dict[str, Any], target: str) -> str:
    return yaml.safe_dump(without_stash(convert(job, target).obj), sort_keys=False, width=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--write", action="store_true", help="rewrite the golden files")
    args = parser.parse_args(argv)
    stale = []
    for _, job, target, path in cases():
        text = render(job, target)
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for path in stale:
        print(f"{'wrote' if args.write else 'differs'}: {path.relative_to(GOLDEN.parent.parent.parent)}")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
