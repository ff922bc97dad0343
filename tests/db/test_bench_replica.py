"""The benchmark's replica (`bench.replica`) runs the loop as `sluice scheduler` does."""

from __future__ import annotations

from unittest.mock import create_autospec

import pytest
from bench.replica import scheduler_loop
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.config import SchedulerConfig
from sluice.status.publisher import StatusPublisher


@pytest.mark.db
def test_the_production_arm_wires_the_publisher_as_sluice_scheduler_does(
    sessions: sessionmaker[Session],
) -> None:
    """Its loop wakes the status publisher when the outbox may have rows and tells it the
    live replicas' count; unwired, the publisher looked only once per idle interval or
    when a row it had deferred came due."""
    publisher = create_autospec(StatusPublisher, instance=True)
    loop = scheduler_loop(sessions, SchedulerConfig(), None, publisher)
    try:
        assert loop.on_change == publisher.wake
        assert loop.on_replicas == publisher.share
    finally:
        loop.close()
    bare = scheduler_loop(sessions, SchedulerConfig(), None, None)
    try:
        assert bare.on_change is None
        assert bare.on_replicas is None
    finally:
        bare.close()
