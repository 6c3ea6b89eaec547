"""``image-reference``: every container can be pulled by name, and all ranks run one MPI build.

Owns: each container and init container of the Launcher and Worker templates has a non-empty
image reference the container runtime can parse (an unparsable one leaves the pod in
InvalidImageName after the job was admitted); optionally (``require_digest``) each is pinned by
digest. A hint that can never block: the launcher and workers run different images (their
first containers, where the operator runs mpirun and the ranks), which risks an MPI ABI
mismatch between ranks.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from policies.interface import Action, Finding, Problem, RuleContext
from policies.kube.images import EXAMPLE, BadImageReference, ParsedImage, parse_image
from policies.workload import ContainerRef, PodGroup, Source, Workload, request_workload

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

    def check(self, ctx: RuleContext) -> list[Finding]:
        params: ImageReferenceParams = ctx.params(self.id)
        findings = []
        workload = request_workload(ctx)
        for _, container in workload.containers():
            finding = self._reference(container, params)
            if finding is not None:
                findings.append(finding)
        if params.warn_on_mismatch:
            mismatch = self._mismatch(workload)
            if mismatch is not None:
                findings.append(mismatch)
        return findings

    def _reference(self, container: ContainerRef, params: ImageReferenceParams) -> Finding | None:
        image = container.container.get("image")
        if not image:
            source = container.image_source()
            return Finding(self.id, source.finding_path,
                           source.said(f'every container needs an image to run; set {source.path}, e.g. "{EXAMPLE}"'),
                           Problem.REQUIRED)
        try:
            reference = parse_image(image)
        except BadImageReference as bad:
            fix = bad.fix or f'write it as [registry/]repository[:tag][@sha256:digest], e.g. "{EXAMPLE}"'
            source = container.image_source()
            return Finding(self.id, source.finding_path, source.said(f"not a valid image reference: {bad}; {fix}"),
                           Problem.INVALID, image)
        if params.require_digest and reference.digest is None:
            # Short enough to arrive whole as a warning (256 characters with path and value).
            source = container.image_source()
            return Finding(self.id, source.finding_path,
                           source.said(f'pin it by digest so every pod runs the same bits: "{image}@sha256:<digest>" '
                                       "(crane digest prints it)"),
                           Problem.INVALID, image)
        return None

    def _mismatch(self, workload: Workload) -> Finding | None:
        launcher = _first_image(workload.launcher)
        worker = _first_image(workload.workers)
        if launcher is None or worker is None or launcher[0].same_image(worker[0]):
            return None
        source = worker[1].image_source()  # where the workers' image is written
        path = source.finding_path
        return Finding(self.id, path, _mismatch_message(self.id, path, launcher[0], worker[0], source,
                                                        f"{workload.workers.noun}s"),
                       Problem.POLICY, ceiling=Action.WARN)


def _first_image(group: PodGroup) -> tuple[ParsedImage, ContainerRef] | None:
    """The parsed image of the container the controller runs MPI in (the first app container),
    with that container; None if unusable."""
    if not group.present:
        return None
    first = next(group.app_containers(), None)
    if first is None:
        return None
    try:
        return parse_image(first.container.get("image") or ""), first
    except BadImageReference:
        return None  # already reported as invalid


# Fewer characters than this per image and the warning no longer says which images differ
# ("e…1" and "g…e"): the field path of an image written in another object goes first.
_READABLE_IMAGE = 24


def _mismatch_message(rule: str, path: str, launcher: ParsedImage, worker: ParsedImage, source: Source,
                      workers: str = "workers") -> str:
    """Fits one warning line (``[rule] path: message``) in the API server's 256 characters,
    shortening the two image names if it must. An image written in a TrainJob's runtime is
    named with the runtime and its field path; when that path leaves too little room for the
    names to be told apart, the runtime alone is named (the images are what the user needs)."""
    def said_briefly(message: str) -> str:
        return f"{source.origin}: {message}" if source.origin else message

    def text(a: str, b: str, said: Callable[[str], str]) -> str:
        return said(f'launcher runs "{a}", {workers} run "{b}": ranks may hit an MPI ABI mismatch; '
                    "use one image for both, pinned by digest")

    names = launcher.short(), worker.short()
    said: Callable[[str], str] = source.said
    budget = WARNING_MAX - len(f"[{rule}] {path}: ") - len(text("", "", said))
    if len(names[0]) + len(names[1]) > budget and budget < 2 * _READABLE_IMAGE:
        said = said_briefly
        budget = WARNING_MAX - len(f"[{rule}] {path}: ") - len(text("", "", said))
    return text(*_fit(*names, budget), said)


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
