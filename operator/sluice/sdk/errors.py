"""What a DAG author sees when a Python DAG is wrong: where, which DAG, task and field, and the fix.

The SDK checks with the same models `sluice dags validate` uses, so the words
are the manifest's; this module only adds what a Python author needs to find
the mistake: the file and line that created the DAG, task or pool, and the
field in its Python spelling (`trigger_rule`, not `triggerRule`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from pydantic.alias_generators import to_snake

_SDK_DIR = str(Path(__file__).resolve().parent)
_TASK_PATH = re.compile(r"spec\.tasks\[(\d+)\](?:\.(.*))?")


class Location(NamedTuple):
    """A place in the author's source: the file and line of a DAG(...), dag.task(...) or Pool."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class Problem(NamedTuple):
    """One mistake: where it was made, in which DAG/task/field, and what to do about it."""

    message: str
    dag: str | None = None
    task: str | None = None
    pool: str | None = None
    field: str | None = None
    location: Location | None = None

    def __str__(self) -> str:
        who = [f"DAG {self.dag!r}"] if self.dag else []
        who += [f"Pool {self.pool!r}"] if self.pool else []
        who += [f"task {self.task!r}"] if self.task else []
        who += [f"field {self.field}"] if self.field else []
        where = f"{self.location}: " if self.location else ""
        return f"{where}{', '.join(who)}: {self.message}" if who else f"{where}{self.message}"


class AuthoringError(ValueError):
    """A DAG or pool the SDK cannot turn into a valid manifest, with every problem found."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


def caller_location() -> Location | None:
    """The first frame outside the SDK: the author's line that is creating something."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not str(Path(filename).resolve()).startswith(_SDK_DIR):
            return Location(filename, frame.f_lineno)
        frame = frame.f_back  # type: ignore[assignment]
    return None


def python_field(path: str) -> str:
    """A manifest field path with its first key in Python spelling: `retryDelay[0]` ->
    `retry_delay[0]`; what is under it (a pod template's own keys) stays as written."""
    head, dot, rest = path.partition(".")
    return to_snake(head) + dot + rest


def task_path(path: str) -> tuple[int, str | None] | None:
    """(task index, field path within the task) for a path under `spec.tasks[i]`, else None."""
    found = _TASK_PATH.fullmatch(path)
    if found is None:
        return None
    return int(found.group(1)), found.group(2)
