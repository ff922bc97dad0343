"""The operator's peering identity works for a uid with no passwd entry (the image's 65532)."""

from __future__ import annotations

import getpass

import pytest

from sluice.cli import operator as operator_cli


def test_the_pod_name_when_the_chart_gives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_ID", "sluice-operator-7d9-abcde")
    assert operator_cli.peering_identity() == "sluice-operator-7d9-abcde"


def test_no_passwd_entry_is_no_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    # kopf's own guess calls getpass.getuser(), which raised KeyError in the image:
    # every operator pod crashed at start (found by make demo-cluster).
    monkeypatch.delenv("POD_ID", raising=False)

    def no_user() -> str:
        raise KeyError("getpwuid(): uid not found: 65532")

    monkeypatch.setattr(getpass, "getuser", no_user)
    identity = operator_cli.peering_identity()
    assert identity.startswith("uid")
    assert "@" in identity
