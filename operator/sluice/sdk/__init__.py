"""Sluice DAGs written in Python, rendered to the manifests the CRDs take.

    from datetime import UTC, datetime
    from sluice.sdk import DAG

    dag = DAG("hello", schedule="@hourly", start_date=datetime(2026, 12, 1, tzinfo=UTC),
              defaults={"image": "busybox:1.36", "command": ["sh", "-c"]})
    extract = dag.task("extract", args=["echo extract"])
    load = dag.task("load", args=["echo load"])
    extract >> load

`sluice dags render FILE.py` prints the manifest. Python runs only then: what
is applied, stored and scheduled is the manifest (ADR 0041, docs/python-sdk.md).
"""

from sluice.sdk.dags import DAG
from sluice.sdk.errors import AuthoringError, Location, Problem
from sluice.sdk.fields import (
    DurationLike,
    JsonValue,
    TaskFields,
    TriggerRuleName,
    WeightRuleName,
)
from sluice.sdk.nodes import Task, TaskGroup
from sluice.sdk.pools import Pool
from sluice.spec.models import TriggerRule, WeightRule

__all__ = [
    "DAG",
    "AuthoringError",
    "DurationLike",
    "JsonValue",
    "Location",
    "Pool",
    "Problem",
    "Task",
    "TaskFields",
    "TaskGroup",
    "TriggerRule",
    "TriggerRuleName",
    "WeightRule",
    "WeightRuleName",
]
