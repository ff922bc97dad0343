"""Workload shapes: the five of Airflow's scheduler performance DAGs, as its code builds them.

Each shape maps a task count to `{task: [upstream tasks]}`; tasks are named
`t0`, `t1`, ... in both systems (`t{i}` is Airflow's `tasks[i]`), so the
metrics can look up a task's upstreams without asking either database. The
five `AIRFLOW_SHAPES` follow the edges that the chain functions of Airflow's
`dev/perf/dags/elastic_dag.py` set, not their docstrings (which draw some of
them the other way round):

- `no_structure`: no edges.
- `linear`: `chain(*tasks)`: t0 -> t1 -> ... -> t(n-1).
- `binary_tree`: `tasks[i].set_downstream(tasks[(i - 1) // 2])`: a fan-in
  toward t0; t(i) runs after its children t(2i+1) and t(2i+2), so the leaves
  start and t0 ends.
- `star`: `tasks[0].set_upstream(tasks[1:])`: a fan-in; t1..t(n-1) start
  together and t0 runs after all of them.
- `grid`: a triangle of side k (the least k with k(k+1)/2 >= n), numbered by
  rows (row i has k - i cells; cell (i, j) is task k*i - i(i-1)/2 + j, the
  cells past n left out); a cell runs after its neighbours (i+1, j) and
  (i, j+1), so the edges fan in toward t0.

Two more shapes are not Airflow's: the fan-outs that this module used to
call `binary_tree` and `star` (from those docstrings). They are kept because
they load Sluice differently (one task's end makes many tasks ready at once):

- `fan_out_tree`: t0 is the root; t(i) runs after t((i-1)//2).
- `fan_out_in`: t0 -> every middle task -> t(n-1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Graph = dict[str, list[str]]


def _name(i: int) -> str:
    return f"t{i}"


def no_structure(n: int) -> Graph:
    return {_name(i): [] for i in range(n)}


def linear(n: int) -> Graph:
    return {_name(i): [_name(i - 1)] if i else [] for i in range(n)}


def binary_tree(n: int) -> Graph:
    return {_name(i): [_name(c) for c in (2 * i + 1, 2 * i + 2) if c < n] for i in range(n)}


def star(n: int) -> Graph:
    return {_name(0): [_name(i) for i in range(1, n)], **{_name(i): [] for i in range(1, n)}}


def grid(n: int) -> Graph:
    side = next(k for k in range(n + 1) if k * (k + 1) // 2 >= n)

    def number(i: int, j: int) -> int:
        return side * i - i * (i - 1) // 2 + j

    graph: Graph = {_name(t): [] for t in range(n)}
    for i in range(side):
        for j in range(side - i):
            if number(i, j) >= n:
                continue
            ups = [number(i + 1, j), number(i, j + 1)] if i + j < side - 1 else []
            graph[_name(number(i, j))] = [_name(u) for u in ups if u < n]
    return graph


def fan_out_tree(n: int) -> Graph:
    return {_name(i): [_name((i - 1) // 2)] if i else [] for i in range(n)}


def fan_out_in(n: int) -> Graph:
    if n < 3:
        return linear(n)
    graph: Graph = {_name(0): []}
    for i in range(1, n - 1):
        graph[_name(i)] = [_name(0)]
    graph[_name(n - 1)] = [_name(i) for i in range(1, n - 1)]
    return graph


SHAPES: dict[str, Callable[[int], Graph]] = {
    "no_structure": no_structure,
    "linear": linear,
    "binary_tree": binary_tree,
    "star": star,
    "grid": grid,
    "fan_out_tree": fan_out_tree,
    "fan_out_in": fan_out_in,
}
# What the benchmark runs unless `--shapes` says otherwise.
AIRFLOW_SHAPES = ("no_structure", "linear", "binary_tree", "star", "grid")


@dataclass(frozen=True)
class Workload:
    shape: str
    dags: int
    tasks: int

    @property
    def total_tasks(self) -> int:
        return self.dags * self.tasks

    @property
    def label(self) -> str:
        return f"{self.shape} {self.dags}x{self.tasks}"

    def graph(self) -> Graph:
        return SHAPES[self.shape](self.tasks)

    def task_specs(self) -> list[dict[str, Any]]:
        """The graph as a Sluice DAG manifest's `spec.tasks` (names and `dependsOn`)."""
        return [
            {"name": name, "dependsOn": ups} if ups else {"name": name}
            for name, ups in self.graph().items()
        ]

    def dag_ids(self) -> list[str]:
        # DNS labels (Sluice) and valid Airflow ids alike.
        short = self.shape.replace("_", "")
        return [f"b-{short}-{self.tasks}-{i:05d}" for i in range(self.dags)]


def check(graph: Graph) -> None:
    """Every upstream exists and the graph is acyclic (t(i) only waits on known tasks)."""
    seen: set[str] = set()
    pending = dict(graph)
    while pending:
        ready = [t for t, ups in pending.items() if all(u in seen for u in ups)]
        if not ready:
            raise ValueError(f"cycle or unknown upstream among {sorted(pending)[:5]}")
        for t in ready:
            seen.add(t)
            del pending[t]
