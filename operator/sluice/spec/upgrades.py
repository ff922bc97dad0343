"""Stored DAG specs written by older Sluice releases, brought up to the shape today's model reads.

A DAG version is stored once and read for as long as its runs exist, while the
spec model (`models.DagSpec`, which forbids unknown fields) changes between
releases. So every stored spec carries the schema version it was written with
(`dag_version.spec_schema_version`) and is upgraded on read, one step per
version, before the model validates it. Reading never rewrites a row: an
older Sluice rolled back to still finds what it wrote, and one that meets a
spec from a newer release says so instead of guessing.

To change the stored shape: raise SPEC_SCHEMA_VERSION and add the step from
the previous version to STEPS (a unit test checks that the chain has no gap).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

SPEC_SCHEMA_VERSION = 3

Step = Callable[[dict[str, Any]], dict[str, Any]]


class SpecSchemaError(ValueError):
    """A stored spec that cannot be brought up to date, with the reason and the fix."""


def _drop_paused(spec: dict[str, Any]) -> dict[str, Any]:
    """1 -> 2: `paused` is no longer part of a version: it is the DAG's state (`dag.is_paused`),
    so pausing a DAG in its manifest does not make a new version (ADR 0011)."""
    return {key: value for key, value in spec.items() if key != "paused"}


def _add_params(spec: dict[str, Any]) -> dict[str, Any]:
    """2 -> 3: a DAG has `params` (Airflow's DAG params, defaults a run's conf overrides);
    a version stored before has none."""
    return {**spec, "params": spec.get("params", {})}


# STEPS[n] turns a spec of schema version n into one of version n + 1.
STEPS: Mapping[int, Step] = {1: _drop_paused, 2: _add_params}


def upgrade_spec(
    spec: object,
    schema_version: int,
    *,
    steps: Mapping[int, Step] = STEPS,
    current: int = SPEC_SCHEMA_VERSION,
) -> dict[str, Any]:
    """The stored `spec` of `schema_version` in the shape of schema version `current`.

    Returns a new dict; the stored one is not changed. Raises SpecSchemaError for a
    version this release cannot read.
    """
    if isinstance(schema_version, bool) or not isinstance(schema_version, int):
        raise SpecSchemaError(
            f"dag_version.spec_schema_version is {schema_version!r}, not a whole number; "
            f"set it to the schema version the spec was written with (1 to {current})"
        )
    if schema_version > current:
        raise SpecSchemaError(
            f"dag_version.spec_schema_version is {schema_version}, newer than this Sluice "
            f"reads (1 to {current}): the version was stored by a newer Sluice; run that "
            "release, or apply the DAG's manifest again with this one to store a version "
            "it can read"
        )
    if schema_version < 1:
        raise SpecSchemaError(
            f"dag_version.spec_schema_version is {schema_version}; schema versions start at 1 "
            f"(specs stored before versions were recorded): set it to the schema version the "
            f"spec was written with (1 to {current})"
        )
    if not isinstance(spec, Mapping):
        raise SpecSchemaError(
            f"dag_version.spec is {_describe(spec)}, not a JSON object; apply the DAG's "
            "manifest again to store a version that can be read"
        )
    upgraded = dict(spec)
    for version in range(schema_version, current):
        step = steps.get(version)
        if step is None:
            raise SpecSchemaError(
                f"no upgrade from spec schema version {version} to {version + 1}; "
                "this is a bug in Sluice: add the step to sluice.spec.upgrades.STEPS"
            )
        upgraded = step(upgraded)
    return upgraded


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"
