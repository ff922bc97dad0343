"""Tasks and task groups, and the `>>` / `<<` operators that connect them.

Both are made by a DAG (`dag.task`, `dag.group`), never on their own, so a
task always knows its DAG and no global "current DAG" is needed. An operator
only records an edge between two nodes on the DAG; which tasks a group's edge
joins (the group's first tasks, or its last) is worked out when the manifest
is made (`edges`), so a group may get its tasks before or after it is connected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar, Union, Unpack

from sluice.sdk.errors import AuthoringError, Location, Problem
from sluice.sdk.fields import TaskFields

if TYPE_CHECKING:
    from sluice.sdk.dags import DAG

Node = Union["Task", "TaskGroup"]
# What `>>` and `<<` take on either side and give back, so chains read left to right.
Operand = TypeVar("Operand", bound=Union["Task", "TaskGroup", Sequence[Union["Task", "TaskGroup"]]])


class _Connectable:
    """`>>` and `<<` for tasks and groups: `a >> b` means b runs after a."""

    dag: DAG
    name: str

    def __rshift__(self, other: Operand) -> Operand:
        for node in _nodes(other):
            self.dag.add_edge(self._node(), node)
        return other

    def __lshift__(self, other: Operand) -> Operand:
        for node in _nodes(other):
            self.dag.add_edge(node, self._node())
        return other

    def __rrshift__(self, other: Sequence[Node]) -> Node:
        # `[a, b] >> c`: a list has no `>>`, so Python asks c.
        for node in _nodes(other):
            self.dag.add_edge(node, self._node())
        return self._node()

    def __rlshift__(self, other: Sequence[Node]) -> Node:
        for node in _nodes(other):
            self.dag.add_edge(self._node(), node)
        return self._node()

    def _node(self) -> Node:
        raise NotImplementedError  # each kind of node returns itself, typed


class Task(_Connectable):
    """One task of a DAG, as `dag.task(name, ...)` or `group.task(name, ...)` made it."""

    def __init__(
        self,
        dag: DAG,
        name: str,
        fields: TaskFields,
        group: TaskGroup | None,
        defined_at: Location | None,
    ) -> None:
        self.dag = dag
        self.name = name
        self.fields = fields
        self.group = group
        self.defined_at = defined_at

    def _node(self) -> Node:
        return self

    def __repr__(self) -> str:
        return f"<Task {self.name!r} of DAG {self.dag.name!r}>"


class TaskGroup(_Connectable):
    """Tasks named `{group}-{task}` that share defaults and connect as one.

    `group >> x`: x runs after the group's last tasks (those nothing else in
    the group runs after); `x >> group`: the group's first tasks run after x.
    """

    def __init__(
        self,
        dag: DAG,
        name: str,
        defaults: TaskFields,
        parent: TaskGroup | None,
        defined_at: Location | None,
    ) -> None:
        self.dag = dag
        self.name = name
        self.defaults = defaults
        self.parent = parent
        self.defined_at = defined_at
        self.children: list[Node] = []

    def _node(self) -> Node:
        return self

    def task(self, name: str, **fields: Unpack[TaskFields]) -> Task:
        """A task named `{group}-{name}`; its own fields win over the group's defaults."""
        task = self.dag.add_task(f"{self.name}-{name}", {**self.defaults, **fields}, self)
        self.children.append(task)
        return task

    def group(self, name: str, **defaults: Unpack[TaskFields]) -> TaskGroup:
        """A group inside this one (`{group}-{name}-...`), its defaults over this group's."""
        inner = self.dag.add_group(f"{self.name}-{name}", {**self.defaults, **defaults}, self)
        self.children.append(inner)
        return inner

    def tasks(self) -> list[Task]:
        """Every task in the group, its inner groups' included, in the order they were made."""
        found: list[Task] = []
        for child in self.children:
            found.extend([child] if isinstance(child, Task) else child.tasks())
        return found

    def contains(self, node: Node) -> bool:
        """Whether `node` is inside this group (at any depth)."""
        parent = node.group if isinstance(node, Task) else node.parent
        while parent is not None:
            if parent is self:
                return True
            parent = parent.parent
        return False

    def __repr__(self) -> str:
        return f"<TaskGroup {self.name!r} of DAG {self.dag.name!r}>"


def _nodes(operand: object) -> list[Node]:
    if isinstance(operand, Task | TaskGroup):
        return [operand]
    if isinstance(operand, Sequence) and not isinstance(operand, str):
        nodes = [item for item in operand if isinstance(item, Task | TaskGroup)]
        if len(nodes) == len(operand):
            return nodes
    raise AuthoringError(
        [Problem(f"`>>` and `<<` take tasks, task groups or lists of them, got {operand!r}")]
    )
