"""A cron expression that never fires, applied as a DAG object: refused with a status.

Before issue 29 `0 0 30 2 *` passed validation and the operator's DAG handler
failed on it (croniter finds no date) and retried forever, with no status.
"""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import Dag

from .cluster import Cluster
from .test_handlers import Operator, _dag, _events, wait_for
from .test_handlers import operator as operator  # the fixture

__all__ = ["operator"]

pytestmark = pytest.mark.k8s


def test_a_cron_that_never_fires_is_refused_naming_the_field(
    operator: Operator, sessions: sessionmaker[Session], k8s_cluster: Cluster
) -> None:
    ns = operator.namespace
    never = {
        "schedule": "0 0 30 2 *",
        "startDate": "2026-12-01T00:00:00Z",
        "tasks": [{"name": "a", "image": "busybox"}],
    }
    k8s_cluster.apply(_dag("never", **never), namespace=ns)
    ready = operator.ready("dag", "never")
    assert ready["status"] == "False"
    assert ready["reason"] == "InvalidSpec"
    assert "spec.schedule" in ready["message"], ready["message"]
    assert "never fires" in ready["message"], ready["message"]
    wait_for("InvalidSpec event", lambda: _events(k8s_cluster, ns, "never", "InvalidSpec"))
    with sessions() as session:
        assert session.get(Dag, "never") is None
