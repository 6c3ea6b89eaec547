"""``conversion-problem``: the job came from an older apiVersion in a form its operator refused.

Conversion never fails (a failing conversion would block reads, updates and deletes of the
job), so a v1alpha1 job with both ``gpus`` and ``processingUnits``, or a total that is not a
multiple of the per-node capacity, is converted anyway and the refusal is recorded in the
``mpijob-webhook.kubeflow.org/conversion-problems`` annotation. This rule reports it on the
next write, in the terms the user wrote the job in. The record is ignored once the v2beta1
fields it is about have changed: the job has then been fixed (or resized) in v2beta1, and the
other rules judge it as it is.
"""
from __future__ import annotations

from policies.interface import UNSET, Action, Finding, NoParams, Problem, RuleContext
from policies.conversion.notes import current_problems
from policies.conversion.tree import ABSENT


class ConversionProblem:
    id = "conversion-problem"
    Params = NoParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        return [Finding(self.id, recorded.field, f"{recorded.message} (written as {recorded.source})",
                        Problem.INVALID, UNSET if recorded.value is ABSENT else recorded.value)
                for recorded in current_problems(ctx.job)]
