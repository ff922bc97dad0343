"""A Pool as a Python object: made once, passed to tasks, rendered as its own manifest.

A Pool is a cluster-scoped Kubernetes object (`kind: Pool`); a task names it
in `pool`. Giving tasks the object rather than a string means a misspelt pool
is a Python NameError, and `sluice dags render` prints the Pool beside the
DAGs that use it. Its rules are the ones `sluice dags validate` applies to a Pool
document (`handlers.objects.pool_issues`), checked when it is made.
"""

from __future__ import annotations

from typing import Any

from sluice.handlers.objects import pool_issues
from sluice.sdk import collecting
from sluice.sdk.errors import AuthoringError, Location, Problem, caller_location
from sluice.spec.models import API_VERSION

POOL_KIND = "Pool"


class Pool:
    """`Pool("etl", slots=4)`: at most 4 slots of work in it at once, across every DAG."""

    def __init__(self, name: str, *, slots: int, description: str | None = None) -> None:
        self.name = name
        self.slots = slots
        self.description = description
        self.defined_at: Location | None = caller_location()
        problems = self._problems()
        if problems:
            raise AuthoringError(problems)
        collecting.pool_created(self)

    def manifest(self) -> dict[str, Any]:
        """The Pool object, as `kubectl apply` takes it."""
        spec: dict[str, Any] = {"slots": self.slots}
        if self.description is not None:
            spec["description"] = self.description
        return {
            "apiVersion": API_VERSION,
            "kind": POOL_KIND,
            "metadata": {"name": self.name},
            "spec": spec,
        }

    def _problems(self) -> list[Problem]:
        return [
            Problem(
                issue.message,
                pool=str(self.name),
                field=_POOL_FIELDS.get(issue.path, issue.path),
                location=self.defined_at,
            )
            for issue in pool_issues(self.manifest())
        ]

    def __repr__(self) -> str:
        return f"Pool({self.name!r}, slots={self.slots!r})"


_POOL_FIELDS = {"metadata.name": "name", "spec.slots": "slots", "spec.description": "description"}
