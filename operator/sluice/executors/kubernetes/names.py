"""Names and labels of a try's Job: deterministic, DNS-safe, unique for long names.

A Job name must be a DNS-1123 label of at most 63 characters (its pods carry
it in the `batch.kubernetes.io/job-name` label). It is a readable prefix (DAG,
task, try) cut to fit, plus a hash of the untruncated (DAG, run id, task,
try), so two tries never share a name however long their DAG and task names
are, and two replicas starting the same try make the same name: the second
create is `AlreadyExists`, never a second Job.
"""

from __future__ import annotations

import re

from sluice.k8s_names import HASH_LENGTH, MAX_LABEL, digest, dns_label

MAX_NAME = MAX_LABEL
LABEL_PREFIX = "sluice.io/"
MANAGED_BY = {"app.kubernetes.io/managed-by": "sluice"}
# Every Job and pod of a try carries this label (its value: the task instance id);
# the watches select on it.
TI_LABEL = LABEL_PREFIX + "ti"
TRY_LABEL = LABEL_PREFIX + "try"
SELECTOR = TI_LABEL

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def job_name(dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
    """`<dag>-<task>-<try>-<hash>`, the readable part cut so the whole fits in 63."""
    suffix = f"{try_number}-{digest(dag_id, run_id, task_id, str(try_number))}"
    return dns_label(f"{dag_id}-{task_id}", suffix, fallback="try")


def label_value(value: str) -> str:
    """`value` itself when it is a valid label value, else a readable cut plus a hash."""
    if len(value) <= MAX_NAME and _LABEL_VALUE.match(value):
        return value
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)
    head = cleaned[: MAX_NAME - HASH_LENGTH - 1].strip("-_.")
    return f"{head}-{digest(value)}" if head else digest(value)
