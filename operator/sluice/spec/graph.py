"""The task graph of a DAG: checks, ordering and priorities.

Graph questions come up in three places: validation (unknown, duplicate and
cyclic dependencies), the scheduler (a stable order and Airflow's priority
weights) and clearing (everything downstream of a task). They live here as
pure functions over names so each caller gets the same answer.

Edges point the way work flows: from an upstream task to the tasks that list
it in `dependsOn`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from sluice.spec.errors import SpecIssue

if TYPE_CHECKING:
    from sluice.spec.models import DagSpec

_Neighbours = Callable[[str], Sequence[str]]

# Priorities are stored in a 32-bit column; Airflow clamps the same way.
MIN_PRIORITY = -(2**31)
MAX_PRIORITY = 2**31 - 1
# Enough to show a user every independent cycle in a real DAG without
# letting a pathological graph make validation slow.
_MAX_REPORTED_CYCLES = 10


def find_cycle(edges: Mapping[str, Sequence[str]]) -> list[str] | None:
    """One cycle in the graph, e.g. `['a', 'b', 'a']`, or None if there is none.

    The cycle starts at its node that comes first in `edges`, so the answer is
    the same on every run. Nodes that only appear as successors are leaves.
    """
    order = {node: index for index, node in enumerate(edges)}
    finished: set[str] = set()
    for root in edges:
        if root in finished:
            continue
        # Iterative DFS: a long chain of tasks must not hit Python's recursion limit.
        path = [root]
        on_path = {root}
        stack = [iter(edges.get(root, ()))]
        while stack:
            successor = next(stack[-1], None)
            if successor is None:
                stack.pop()
                node = path.pop()
                on_path.discard(node)
                finished.add(node)
            elif successor in on_path:
                cycle = path[path.index(successor) :]
                start = min(range(len(cycle)), key=lambda i: order.get(cycle[i], len(order)))
                rotated = cycle[start:] + cycle[:start]
                return [*rotated, rotated[0]]
            elif successor not in finished:
                path.append(successor)
                on_path.add(successor)
                stack.append(iter(edges.get(successor, ())))
    return None


def dependency_issues(tasks: Sequence[tuple[str | None, Sequence[str | None]]]) -> list[SpecIssue]:
    """Every problem with task names and `dependsOn`, with paths relative to `spec`.

    Takes plain (name, dependsOn) pairs so it also works on a manifest whose
    other fields failed to parse: the user sees graph problems in the same
    pass. None stands for a name or entry that is not a string (reported
    elsewhere); it keeps the positions of the others right.
    """
    issues: list[SpecIssue] = []
    first_index: dict[str, int] = {}
    for index, (name, _) in enumerate(tasks):
        if name is None:
            continue
        if name in first_index:
            issues.append(
                SpecIssue(
                    f"tasks[{index}].name",
                    f"name {name!r} is not unique (also tasks[{first_index[name]}]); "
                    "rename one of them",
                )
            )
        else:
            first_index[name] = index
    known = ", ".join(first_index)
    downstream: dict[str, list[str]] = {name: [] for name in first_index}
    for index, (name, depends_on) in enumerate(tasks):
        seen: set[str] = set()
        for position, upstream in enumerate(depends_on):
            path = f"tasks[{index}].dependsOn[{position}]"
            if upstream is None:
                continue
            if upstream == name:
                issues.append(SpecIssue(path, f"task {name!r} depends on itself; remove it"))
            elif upstream not in first_index:
                issues.append(
                    SpecIssue(path, f"dependency {upstream!r} not defined; tasks are: {known}")
                )
            elif upstream in seen:
                issues.append(SpecIssue(path, f"dependency {upstream!r} is listed twice"))
            elif name is not None and first_index[name] == index:
                downstream[upstream].append(name)
            seen.add(upstream)
    issues.extend(_cycle_issues(downstream, tasks, first_index))
    return issues


def _cycle_issues(
    downstream: dict[str, list[str]],
    tasks: Sequence[tuple[str | None, Sequence[str | None]]],
    first_index: Mapping[str, int],
) -> list[SpecIssue]:
    issues: list[SpecIssue] = []
    for _ in range(_MAX_REPORTED_CYCLES):
        cycle = find_cycle(downstream)
        if cycle is None:
            break
        # Point at the dependsOn entry that closes the loop back to the first task.
        closing_upstream, first = cycle[-2], cycle[0]
        index = first_index[first]
        position = list(tasks[index][1]).index(closing_upstream)
        issues.append(
            SpecIssue(
                f"tasks[{index}].dependsOn[{position}]",
                f"dependency cycle detected: {' -> '.join(cycle)}; "
                "remove one of these dependencies",
            )
        )
        downstream[closing_upstream].remove(first)
    return issues


def topological_order(dag: DagSpec) -> list[str]:
    """Task names, each after all of its upstreams; ties keep declaration order."""
    position = {task.name: index for index, task in enumerate(dag.tasks)}
    waiting = {task.name: len(task.depends_on) for task in dag.tasks}
    ready = [(position[name], name) for name, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for child in dag.downstream(name):
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, (position[child], child))
    if len(order) != len(dag.tasks):
        raise ValueError("the task graph has a cycle")
    return order


def descendants(dag: DagSpec, name: str) -> set[str]:
    """Every task that runs after `name`, directly or transitively."""
    return _reachable(name, dag.downstream)


def ancestors(dag: DagSpec, name: str) -> set[str]:
    """Every task that must finish before `name`, directly or transitively."""
    return _reachable(name, dag.upstream)


def priority_weights(dag: DagSpec) -> dict[str, int]:
    """Each task's effective priority, with Airflow's weight rules.

    downstream: own weight plus the weights of all tasks after it (so work that
    unblocks the most goes first); upstream: own plus all tasks before it (so
    runs that are further along finish first); absolute: own weight. Each
    relative counts once, however many paths lead to it.
    """
    order = topological_order(dag)
    weight = {task.name: task.priority_weight for task in dag.tasks}
    below = _closure(reversed(order), dag.downstream)
    above = _closure(order, dag.upstream)
    result: dict[str, int] = {}
    for task in dag.tasks:
        # Compared as text: importing WeightRule here would make models and graph import each other.
        if task.weight_rule == "downstream":
            total = weight[task.name] + sum(weight[other] for other in below[task.name])
        elif task.weight_rule == "upstream":
            total = weight[task.name] + sum(weight[other] for other in above[task.name])
        else:
            total = weight[task.name]
        result[task.name] = max(MIN_PRIORITY, min(MAX_PRIORITY, total))
    return result


def _closure(order: Iterable[str], neighbours: _Neighbours) -> dict[str, set[str]]:
    """Transitive neighbours of every node; `order` visits neighbours before the node."""
    result: dict[str, set[str]] = {}
    for name in order:
        reach: set[str] = set()
        for other in neighbours(name):
            reach.add(other)
            reach |= result[other]
        result[name] = reach
    return result


def _reachable(name: str, neighbours: _Neighbours) -> set[str]:
    seen: set[str] = set()
    pending = list(neighbours(name))
    while pending:
        current = pending.pop()
        if current not in seen:
            seen.add(current)
            pending.extend(neighbours(current))
    return seen
