"""The stand-in cluster of `make bench-steady` selects watch events by label as the API
server does, so each replica's watches carry only its own tries' events there too."""

from __future__ import annotations

from bench.fake_cluster import selects


def test_label_selectors_of_keys_and_equalities() -> None:
    labels = {"sluice.io/ti": "7", "sluice.io/replica": "r1"}
    assert selects("", labels)
    assert selects("sluice.io/ti", labels)
    assert selects("sluice.io/ti,sluice.io/replica=r1", labels)
    assert not selects("sluice.io/ti,sluice.io/replica=r2", labels)
    assert not selects("sluice.io/ti", {"sluice.io/replica": "r1"})


def test_the_stand_in_answers_without_nagles_delay() -> None:
    """TCP_NODELAY on its sockets, as a real API server's: with Nagle on, each response
    (headers, then body) waited out the client's delayed ACK, 42 ms a request, and the
    production arm's DagRun objects showed their runs' ends 25-29 s after the unpause
    in trials whose runs had ended within 2 s."""
    from bench.fake_cluster import _Handler

    assert _Handler.disable_nagle_algorithm is True
