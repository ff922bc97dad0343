"""Workload shapes, the same five as Airflow's scheduler performance DAGs.

Each shape maps a task count to `{task: [upstream tasks]}`; tasks are named
`t0`, `t1`, ... in both systems, so the metrics can look up a task's upstreams
without asking either database. Written from the shapes' descriptions:

- `no_structure`: no edges.
- `linear`: t0 -> t1 -> ... -> t(n-1).
- `binary_tree`: t0 is the root; t(i) runs after t((i-1)//2).
- `star`: t0 -> every middle task -> t(n-1).
- `grid`: a triangular grid whose edges fan in toward t0. Cells (i, j) with
  i + j < k are numbered by diagonal (t0 is (0, 0)); a cell runs after its
  neighbours (i+1, j) and (i, j+1), so the far diagonal starts and t0 ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Graph = dict[str, list[str]]


def _name(i: int) -> str:
    return f"t{i}"


def no_structure(n: int) -> Graph:
    return {_name(i): [] for i in range(n)}


def linear(n: int) -> Graph:
    return {_name(i): [_name(i - 1)] if i else [] for i in range(n)}


def binary_tree(n: int) -> Graph:
    return {_name(i): [_name((i - 1) // 2)] if i else [] for i in range(n)}


def star(n: int) -> Graph:
    if n < 3:
        return linear(n)
    graph: Graph = {_name(0): []}
    for i in range(1, n - 1):
        graph[_name(i)] = [_name(0)]
    graph[_name(n - 1)] = [_name(i) for i in range(1, n - 1)]
    return graph


def grid(n: int) -> Graph:
    k = 0
    while k * (k + 1) // 2 < n:
        k += 1
    cells = [(i, d - i) for d in range(k) for i in range(d + 1)][:n]
    index = {cell: number for number, cell in enumerate(cells)}
    graph: Graph = {}
    for number, (i, j) in enumerate(cells):
        ups = [index[c] for c in ((i + 1, j), (i, j + 1)) if c in index]
        graph[_name(number)] = [_name(u) for u in ups]
    return graph


SHAPES: dict[str, Callable[[int], Graph]] = {
    "no_structure": no_structure,
    "linear": linear,
    "binary_tree": binary_tree,
    "star": star,
    "grid": grid,
}


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
