"""From the edges `>>` and `<<` recorded (between tasks and groups) to each task's dependsOn.

A group stands for its first tasks when something runs before it and for its
last tasks when something runs after it. "First" and "last" are judged by the
edges inside the group only (as Airflow's TaskGroup does): a task with no
upstream in its group is first, one with no downstream in its group is last.
Those inner edges may join inner groups, so the rule applies again inside
them; each step looks at a smaller group, so it ends.
"""

from __future__ import annotations

from collections.abc import Sequence

from sluice.sdk.nodes import Node, Task, TaskGroup

Edge = tuple[Node, Node]


def upstream_names(tasks: Sequence[Task], edges: Sequence[Edge]) -> dict[str, list[str]]:
    """Each task's direct upstream task names, in the order the edges were written, once each."""
    upstream: dict[str, list[str]] = {task.name: [] for task in tasks}
    for before, after in task_edges(edges, within=None):
        names = upstream[after.name]
        if before.name not in names:
            names.append(before.name)
    return upstream


def task_edges(edges: Sequence[Edge], within: TaskGroup | None) -> list[tuple[Task, Task]]:
    """Every task-to-task edge the node edges make (only those inside `within`, if given)."""
    found: list[tuple[Task, Task]] = []
    for before, after in edges:
        if within is not None and not (within.contains(before) and within.contains(after)):
            continue
        found.extend(
            (first, second)
            for first in _last_tasks(before, edges)
            for second in _first_tasks(after, edges)
        )
    return found


def _first_tasks(node: Node, edges: Sequence[Edge]) -> list[Task]:
    if isinstance(node, Task):
        return [node]
    has_upstream = {after.name for _, after in task_edges(edges, within=node)}
    return [task for task in node.tasks() if task.name not in has_upstream]


def _last_tasks(node: Node, edges: Sequence[Edge]) -> list[Task]:
    if isinstance(node, Task):
        return [node]
    has_downstream = {before.name for before, _ in task_edges(edges, within=node)}
    return [task for task in node.tasks() if task.name not in has_downstream]
