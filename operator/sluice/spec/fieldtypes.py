"""Annotated field types for Kubernetes-style specs: durations, names, exit codes, quantities.

Each type carries its own parsing and its own error message, so a model that
uses one (the DAG spec today, a Pool or Backfill spec later) rejects bad input
with the same words everywhere, and serializes it back the way it was written.
"""

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, PlainSerializer

from sluice.spec import names
from sluice.spec.durations import format_duration, parse_duration


def _check(problem: str | None) -> None:
    if problem is not None:
        raise ValueError(problem)


def _dns_label(value: str) -> str:
    _check(names.dns_label_problem(value))
    return value


def _dns_subdomain(value: str) -> str:
    _check(names.dns_subdomain_problem(value))
    return value


def _not_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than 0s; leave the field out for no limit")
    return value


def _exit_codes(value: object) -> object:
    # A single code is the common case; null is how a user switches skipping off.
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return value


def _quantities(value: object) -> object:
    # YAML reads `cpu: 1` as a number; Kubernetes quantities are strings.
    if not isinstance(value, dict):
        return value
    return {
        kind: {
            resource: str(amount)
            if isinstance(amount, int | float) and not isinstance(amount, bool)
            else amount
            for resource, amount in amounts.items()
        }
        if isinstance(amounts, dict)
        else amounts
        for kind, amounts in value.items()
    }


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
]
PositiveDuration = Annotated[Duration, AfterValidator(_positive)]
DnsLabel = Annotated[str, AfterValidator(_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(_dns_subdomain)]
NonEmptyStr = Annotated[str, AfterValidator(_not_empty)]
ExitCodes = Annotated[list[Annotated[int, Field(ge=0, le=255)]], BeforeValidator(_exit_codes)]
Resources = Annotated[
    dict[Literal["requests", "limits"], dict[str, str]], BeforeValidator(_quantities)
]
