"""Which DAGs and Pools a Python file made while it was imported, for `sluice dags render`.

A file "defines" every DAG and Pool created while it runs, wherever it keeps
them (a module global, a list a factory filled, nowhere at all): the loader
opens a collection, the constructors add to it. Outside a collection (a test,
a notebook) creating one records nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.sdk.dags import DAG
    from sluice.sdk.pools import Pool


@dataclass
class Collection:
    """What one import created, in order."""

    dags: list[DAG] = field(default_factory=list)
    pools: list[Pool] = field(default_factory=list)


_current: ContextVar[Collection | None] = ContextVar("sluice_sdk_collection", default=None)


@contextmanager
def collect() -> Iterator[Collection]:
    """Record every DAG and Pool created inside the block."""
    collection = Collection()
    token = _current.set(collection)
    try:
        yield collection
    finally:
        _current.reset(token)


def dag_created(dag: DAG) -> None:
    collection = _current.get()
    if collection is not None:
        collection.dags.append(dag)


def pool_created(pool: Pool) -> None:
    collection = _current.get()
    if collection is not None:
        collection.pools.append(pool)
