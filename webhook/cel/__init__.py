"""Evaluating exported ValidatingAdmissionPolicies outside the API server, for
``check --vap`` and the tests: a CEL interpreter (the optional ``cel-python`` package) with the
Kubernetes CEL libraries the exported policy uses, and the API server's way of applying a
policy and its bindings to a request.
"""

# The project is installed from its checkout, not from an index: the requirement itself is
# what to install (the vap extra of pyproject.toml).
MISSING = ("evaluating ValidatingAdmissionPolicies needs the optional cel-python package: "
           "pip install 'cel-python>=0.5' (the vap extra: pip install -e '.[vap]' in the checkout)")


class CelUnavailable(RuntimeError):
    """cel-python is not installed."""

    def __init__(self) -> None:
        super().__init__(MISSING)
