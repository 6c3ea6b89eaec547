"""The Flask app in-process through its test client, for route and envelope tests: post
bodies, get status and JSON back, and see each Decision the admission logic reported."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flask.testing import FlaskClient

from policies.interface import Action, Finding, Mutated, Mutation, NoParams, Rule, RuleContext
from policies.cluster_view import NO_CLUSTER, ClusterView
from policies.config.layered_policy import Policy
from policies.config.rule_settings import MutationConfig, RuleConfig, Settings
from policies.mutations.edits import WorkingCopy
from policies.registry import default_settings
from webhook import create_app
from webhook.admission import Admission, Decision
from webhook.runtime import Runtime


@dataclass
class Webhook:
    client: FlaskClient
    admission: Admission
    decisions: list[Decision] = field(default_factory=list)

    def post(self, path: str, body: Any, *, content_type: str | None = "application/json",
             **options: Any) -> tuple[int, Any]:
        """POST ``body`` (bytes as they are, anything else as JSON); the status and decoded answer."""
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        headers = {"Content-Type": content_type} if content_type else {}
        answer = self.client.post(path, data=data, headers=headers, **options)
        assert answer.mimetype == "application/json", answer.get_data(as_text=True)[:300]
        return answer.status_code, json.loads(answer.get_data())

    def review(self, path: str, review: dict[str, Any]) -> dict[str, Any]:
        """POST an AdmissionReview; the whole answer, which must be a 200 for the same uid."""
        status, answer = self.post(path, review)
        assert status == 200, (status, answer)
        assert answer["response"]["uid"] == review["request"]["uid"]
        return answer

    @property
    def last(self) -> Decision:
        return self.decisions[-1]


def webhook(*, rules: Sequence[Rule] | None = None, mutations: Sequence[Mutation] | None = None,
            policy: Policy | None = None, cluster: ClusterView = NO_CLUSTER, **admission: Any) -> Webhook:
    """An app around one Admission: the registry's rules and mutations unless given (then the
    policy holds exactly those, at their defaults)."""
    fixed = policy or (Policy() if rules is None and mutations is None else Policy(settings=settings_of(rules, mutations)))
    logic = Admission(policy=lambda: fixed, cluster=cluster, rules=rules, mutations=mutations, **admission)
    served = Webhook(create_app(Runtime(logic)).test_client(), logic)
    logic.observers.append(served.decisions.append)
    return served


def settings_of(rules: Sequence[Rule] | None, mutations: Sequence[Mutation] | None) -> Settings:
    registry = default_settings()
    return Settings(
        rules=registry.rules if rules is None else {r.id: RuleConfig(r.default_action, r.Params()) for r in rules},
        mutations=registry.mutations if mutations is None else {
            m.id: MutationConfig(m.enabled_by_default, m.Params()) for m in mutations},
    )


@dataclass
class ProbeRule:
    """A rule for envelope tests: reports what ``report`` returns for the context it is given
    (and remembers the contexts), or raises it if it is an exception."""

    id: str
    report: Callable[[RuleContext], Sequence[Finding]] | Sequence[Finding] | BaseException = ()
    default_action: Action = Action.DENY
    seen: list[RuleContext] = field(default_factory=list)
    Params: ClassVar[type] = NoParams
    needs_cluster: ClassVar[bool] = False

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        self.seen.append(ctx)
        if isinstance(self.report, BaseException):
            raise self.report
        yield from (self.report(ctx) if callable(self.report) else self.report)


@dataclass
class ProbeMutation:
    """A mutation for envelope tests: sets ``metadata.labels[probe]`` or raises ``error``."""

    id: str
    error: BaseException | None = None
    Params: ClassVar[type] = NoParams
    enabled_by_default: ClassVar[bool] = True

    def apply(self, job: WorkingCopy, ctx: RuleContext) -> Mutated:
        if self.error is not None:
            raise self.error
        labels = job.writable(("metadata", "labels"))
        assert labels is not None, "the probe is applied to jobs with a metadata map"
        labels["probe"] = "yes"
        return Mutated(changed=True, warnings=("labelled",))
