"""``image-reference``: every container can be pulled by name, and all ranks run one MPI build.

Owns: each container and init container of the Launcher and Worker templates has a non-empty
image reference the container runtime can parse (an unparsable one leaves the pod in
InvalidImageName after the job was admitted); optionally (``require_digest``) each is pinned by
digest. A hint that can never block: the launcher and workers run different images (their
first containers, where the operator runs mpirun and the ranks), which risks an MPI ABI
mismatch between ranks.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from policies.base import Action, Finding, Problem, RuleContext
from policies.images import EXAMPLE, BadImageReference, ParsedImage, parse_image
from policies.jobs import LAUNCHER, WORKER, all_containers, containers, replica_path, replica_spec

WARNING_MAX = 256  # the API server truncates longer warnings


@dataclass(frozen=True)
class ImageReferenceParams:
    require_digest: bool = False  # refuse images pinned only by tag (a tag can move between pulls)
    warn_on_mismatch: bool = True  # hint when launcher and worker images differ


class ImageReference:
    id = "image-reference"
    Params = ImageReferenceParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        params: ImageReferenceParams = ctx.params(self.id)
        for _, path, container in all_containers(ctx.job):
            yield from self._reference(f"{path}.image", container.get("image"), params)
        if params.warn_on_mismatch:
            yield from self._mismatch(ctx.job)

    def _reference(self, path: str, image: str | None, params: ImageReferenceParams) -> Iterator[Finding]:
        if not image:
            yield Finding(self.id, path, f'every container needs an image to run; set {path}, e.g. "{EXAMPLE}"',
                          Problem.REQUIRED)
            return
        try:
            reference = parse_image(image)
        except BadImageReference as bad:
            fix = bad.fix or f'write it as [registry/]repository[:tag][@sha256:digest], e.g. "{EXAMPLE}"'
            yield Finding(self.id, path, f"not a valid image reference: {bad}; {fix}", Problem.INVALID, image)
            return
        if params.require_digest and reference.digest is None:
            # Short enough to arrive whole as a warning (256 characters with path and value).
            yield Finding(self.id, path, f'pin it by digest so every pod runs the same bits: "{image}@sha256:<digest>" '
                                         "(crane digest prints it)",
                          Problem.INVALID, image)

    def _mismatch(self, job: Mapping[str, Any]) -> Iterator[Finding]:
        launcher = _first_image(job, LAUNCHER)
        worker = _first_image(job, WORKER)
        if launcher is None or worker is None or launcher[1].same_image(worker[1]):
            return
        path = worker[0]
        yield Finding(self.id, path, _mismatch_message(self.id, path, launcher[1], worker[1]),
                      Problem.POLICY, ceiling=Action.WARN)


def _first_image(job: Mapping[str, Any], replica_type: str) -> tuple[str, ParsedImage] | None:
    """(field path, parsed reference) of the container the operator runs MPI in; None if unusable."""
    first = next(containers(replica_spec(job, replica_type), replica_path(replica_type)), None)
    if first is None:
        return None
    path, container = first
    try:
        return f"{path}.image", parse_image(container.get("image") or "")
    except BadImageReference:
        return None  # already reported as invalid


def _mismatch_message(rule: str, path: str, launcher: ParsedImage, worker: ParsedImage) -> str:
    """Fits one warning line (``[rule] path: message``) in the API server's 256 characters,
    shortening the two image names if it must."""
    def text(a: str, b: str) -> str:
        return (f'launcher runs "{a}", workers run "{b}": ranks may hit an MPI ABI mismatch; '
                "use one image for both, pinned by digest")

    budget = WARNING_MAX - len(f"[{rule}] {path}: ") - len(text("", ""))
    return text(*_fit(launcher.short(), worker.short(), budget))


def _fit(a: str, b: str, budget: int) -> tuple[str, str]:
    """Both within ``budget`` characters together: a short one stays whole, long ones share."""
    if len(a) + len(b) <= budget:
        return a, b
    half = budget // 2
    if len(a) <= half:
        return a, _middle_ellipsis(b, budget - len(a))
    if len(b) <= half:
        return _middle_ellipsis(a, budget - len(b)), b
    return _middle_ellipsis(a, half), _middle_ellipsis(b, budget - half)


def _middle_ellipsis(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    keep = max(width - 1, 2)
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2:]
