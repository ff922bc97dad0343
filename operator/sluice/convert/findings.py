"""What a conversion could not carry over, or carried over with a difference.

Every argument, statement and template the converter meets either maps onto
the manifest or becomes a finding here, with the file and line it came from:
nothing is dropped without a word. A gap is a part of the DAG that was not
converted (the command exits 1 unless `--partial`); a note is a part that was
converted but behaves or reads differently on Sluice (a renamed task, a
default Airflow 2 would have taken otherwise). Both are printed, and written
into the manifest as comments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


class ConvertError(Exception):
    """The file cannot be read as Python at all; the message names the file, line and fix."""


@dataclass(frozen=True)
class Finding:
    kind: Literal["gap", "note"]
    path: str
    line: int
    message: str
    dag: str | None = None  # the Airflow dag_id, once known
    task: str | None = None  # the Airflow task_id, once known

    @property
    def is_gap(self) -> bool:
        return self.kind == "gap"

    def where(self) -> str:
        owner = ""
        if self.dag is not None:
            owner = f" DAG {self.dag!r}" + (f" task {self.task!r}" if self.task else "")
        return f"{self.path}:{self.line}:{owner}"

    def render(self) -> str:
        """One line: `FILE:LINE: DAG 'd' task 't': gap: why; fix`."""
        return f"{self.where()} {self.kind}: {self.message}"
