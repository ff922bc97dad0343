"""The error types every consumer of a DAG spec sees.

A spec can be wrong in many places at once, and the person fixing it wants all
of them in one go, each pointing at the field to change. So validation never
stops at the first problem: it collects `SpecIssue`s (a field path in the
manifest's own camelCase spelling, and a message that names the fix) and
raises them together as one `SpecError`. The kopf handlers turn that into a
status condition and an Event; the CLI prints one line per issue.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import NamedTuple

from pydantic_core import PydanticCustomError

# The pydantic error type that carries several SpecIssues at once; see issues_error.
ISSUES_ERROR_TYPE = "sluice_spec_issues"


class SpecIssue(NamedTuple):
    """One problem in a manifest: where (e.g. `spec.tasks[2].image`) and what to do about it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(ValueError):
    """A manifest that cannot be accepted, with every issue that was found."""

    def __init__(self, issues: Iterable[SpecIssue], dag_name: str | None = None) -> None:
        self.issues: list[SpecIssue] = list(issues)
        self.dag_name = dag_name
        super().__init__(self._summary())

    def _summary(self) -> str:
        who = f"DAG {self.dag_name!r}" if self.dag_name else "DAG manifest"
        count = len(self.issues)
        lines = [f"{who} is invalid ({count} issue{'s' if count != 1 else ''})"]
        lines.extend(f"  {issue}" for issue in self.issues)
        return "\n".join(lines)


def issues_error(issues: Iterable[SpecIssue]) -> PydanticCustomError:
    """Wrap cross-field issues so a model validator can raise all of them at once.

    Pydantic lets a validator raise only one error, at the model's location.
    The individual issues (with paths relative to that model) travel in the
    error's context, and `validation.translate_errors` unpacks them again.
    """
    found = list(issues)
    summary = "; ".join(str(issue) for issue in found)
    return PydanticCustomError(
        ISSUES_ERROR_TYPE,
        "{summary}",
        {"summary": summary, "issues": [tuple(issue) for issue in found]},
    )


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A hint for a misspelt name: the close choices, or all of them when none is close."""
    options = sorted(set(choices))
    close = difflib.get_close_matches(word, options, n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(repr(choice) for choice in close) + "?"
    return "valid names are: " + ", ".join(options)
