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
import secrets

from sluice.k8s_names import HASH_LENGTH, MAX_LABEL, digest, dns_label

MAX_NAME = MAX_LABEL
LABEL_PREFIX = "sluice.io/"
MANAGED_BY = {"app.kubernetes.io/managed-by": "sluice"}
# Every Job and pod of a try carries this label (its value: the task instance id);
# the watches select on it.
TI_LABEL = LABEL_PREFIX + "ti"
TRY_LABEL = LABEL_PREFIX + "try"
SELECTOR = TI_LABEL
# The replica that reports on the try: it created the Job, or adopted it from a dead
# replica and moved the label onto itself. Each replica watches only its own (ADR 0013).
REPLICA_LABEL = LABEL_PREFIX + "replica"

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


def new_replica_id() -> str:
    """A replica's watch identity: new at every start (a restarted replica's tries are
    another replica's to adopt, its own included), 12 hex characters."""
    return secrets.token_hex(6)


def replica_selector(replica: str) -> str:
    """The label selector of one replica's tries (their Jobs and pods)."""
    return f"{TI_LABEL},{REPLICA_LABEL}={replica}"


def try_selector(ti_id: int, try_number: int) -> str:
    """The label selector of one try's Job and pods, whichever replica watches them."""
    return f"{TI_LABEL}={ti_id},{TRY_LABEL}={try_number}"
