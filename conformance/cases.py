"""The suite's cases: one Sluice DAG manifest each, with the scenario in its annotations.

A case is a plain manifest (`sluice dags validate` accepts it) under
`cases/<area>/<name>.yaml`; the DAG's name is the case's name. The schedule
area's cases are decided in-process at a fixed instant; the other areas' cases
(`EXECUTED_AREAS`) run their tasks, on real scheduler processes, and are
observed once their runs have ended. What the scenario needs beyond the DAG is
written as annotations, so one file says it all:

- `conformance.sluice.io/about`: what the case checks, in one sentence;
- `conformance.sluice.io/now`: the instant both sides observe the schedule at
  (UTC), so a case with catchup off gives the same runs on every machine
  (schedule cases only: an executed case runs at the real time, so its runs
  must not depend on it, e.g. `@once` with a past startDate);
- `conformance.sluice.io/manual-runs`: instants (space-separated) at which a
  run is triggered by hand, beside the scheduled ones;
- `conformance.sluice.io/last-run`: the data interval (`START END`) of a
  scheduled run the DAG already has: the DAG is (re)parsed at `now` with it;
- `conformance.sluice.io/deviation`: the id of a documented deviation (the
  deviations of docs/semantics.md explain it): the case is expected to differ;
  `id@2` limits it to Airflow 2.x (several, space-separated, may be given);
- `conformance.sluice.io/observe: order` (executed cases): also compare the order
  tasks ran in, as waves, and how many runs and tasks ran at once
  (`executions.order_of`); for a case whose order is deterministic (one slot,
  one run at a time, retries seconds apart);
- `conformance.sluice.io/pools`: pools the case's tasks use, `NAME=SLOTS`
  (space-separated), created with these slots on both sides before the DAG
  runs; name them after the case, since Sluice's side runs every case in one
  database;
- `conformance.sluice.io/triggers` (executed cases): logical dates (space-separated)
  of manual runs asked for once the DAG is registered, before it runs: `airflow
  dags trigger` on Airflow, `scheduler.triggers.trigger_run` on Sluice; whether
  each was created or refused is compared too (`triggers`);
- `conformance.sluice.io/trigger-conf` (with `triggers`): a JSON object, the conf
  of every manual run asked for (`airflow dags trigger -c`, `trigger_run(conf=)`);
- `conformance.sluice.io/wait: SECONDS` (executed cases): observe the DAG's runs that
  long after its first run appeared, ended or not (for runs that never end, such as
  a dependsOnPast task after a failure), instead of once every run has ended;
- `conformance.sluice.io/backfill: "START END"` (the `backfill` area, and only
  there): once the DAG's scheduled and triggered runs have ended, a backfill over
  these logical dates (both included), then the DAG's runs once every one has ended;
- `conformance.sluice.io/backfill-reprocess: none|failed|completed`: what the
  backfill does with a date that already has an ended run (default `none`: keep
  it; `failed`: run a failed one again; `completed`: run it again whatever its end).
  Airflow 3.3.2's `--reprocess-behavior`; on Airflow 2.10.5 `failed` is
  `--rerun-failed-tasks` and `completed` is `--reset-dagruns`;
- `conformance.sluice.io/backfill-max-active-runs: N`: the backfill's own limit
  (Airflow 3.3.2's `--max-active-runs`, Sluice's `--max-active-runs`); Airflow
  2.10.5's backfill has no such option and is limited by the DAG's `max_active_runs`;
- `conformance.sluice.io/clear: "TASKS [downstream] [upstream] [only-failed]"` (the
  `clearing` area): once the DAG's runs have ended, clear these tasks (names
  joined by commas, or `*` for every task of the run), with everything
  downstream and/or upstream of them, only those failed or upstream_failed;
  then the DAG's runs once every one has ended again. `airflow tasks clear` on
  Airflow, `sluice tasks clear` on Sluice;
- `conformance.sluice.io/mark: "TASK success|failed [downstream] [upstream]"` (the
  `clearing` area, instead of `clear`): mark one task so, with its relatives when
  asked (Airflow's `set_task_instance_state`, `sluice tasks mark`), then the same;
- `conformance.sluice.io/action-runs: "DATE [DATE...]"`: the logical dates of the
  runs the clear or mark acts on (default: every run the DAG has then);
- `conformance.sluice.io/action-after: SECONDS`: act this many seconds after the
  DAG's first run appeared instead of once every run has ended (for runs that
  wait on the one acted on, e.g. under dependsOnPast); the action then waits
  until each run acted on has ended, or at least has no task under way
  (scheduled, queued, running, up for retry): one waiting on another run may be
  acted on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sluice.spec.errors import SpecError
from sluice.spec.models import DagManifest
from sluice.spec.validation import load_dag_documents

ROOT = Path(__file__).resolve().parent
CASES = ROOT / "cases"
PREFIX = "conformance.sluice.io/"
# Areas whose cases run their tasks (real schedulers, a fresh database), compared once
# their runs have ended; every other area is decided in-process at the case's `now`.
EXECUTED_AREAS = frozenset(
    {"dependencies", "retries", "limits", "across-runs", "backfill", "clearing", "params"}
)
# What a backfill may do with a date that already has an ended run (see the module doc).
REPROCESS_CHOICES = ("none", "failed", "completed")
# What `observe` may ask for beyond each run's and task's end state.
OBSERVABLE = frozenset({"order"})
# A clear's and a mark's options (after the tasks, and a mark's state), in this spelling.
CLEAR_OPTIONS = ("downstream", "upstream", "only-failed")
MARK_OPTIONS = ("downstream", "upstream")
MARK_STATES = ("success", "failed")


class CaseError(ValueError):
    """A case file that cannot be used, and why."""


@dataclass(frozen=True)
class BackfillAsk:
    """The backfill a `backfill` case asks for once its other runs have ended."""

    start: datetime
    end: datetime
    reprocess: str = "none"
    max_active_runs: int | None = None


@dataclass(frozen=True)
class ActionAsk:
    """The clear or mark a `clearing` case asks for once its runs have ended."""

    verb: str  # "clear" or "mark"
    tasks: tuple[str, ...]  # () for a clear of every task of the run
    state: str | None = None  # a mark's: success or failed
    downstream: bool = False
    upstream: bool = False
    only_failed: bool = False
    runs: tuple[datetime, ...] = ()  # logical dates; () for every run the DAG has
    after: float | None = None  # act this long after the first run, ended or not

    def covers(self, logical_date: datetime) -> bool:
        """Whether the action is for the run of this logical date."""
        return not self.runs or logical_date in self.runs


@dataclass(frozen=True)
class Case:
    name: str
    area: str
    path: Path
    manifest: DagManifest
    about: str
    now: datetime | None  # None exactly when the case executes
    manual_runs: tuple[datetime, ...]
    last_run: tuple[datetime, datetime] | None
    deviations: tuple[str, ...]
    observe: frozenset[str] = frozenset()
    pools: tuple[tuple[str, int], ...] = ()
    triggers: tuple[datetime, ...] = ()
    trigger_conf: dict[str, Any] | None = None  # the conf of every manual run asked for
    wait: float | None = None
    backfill: BackfillAsk | None = None
    action: ActionAsk | None = None

    @property
    def executes(self) -> bool:
        """Whether the case runs its tasks (see EXECUTED_AREAS) rather than being decided
        in-process at `now`."""
        return self.area in EXECUTED_AREAS

    def deviation_for(self, airflow_version: str) -> str | None:
        """The deviation expected against this Airflow version, if any."""
        major = airflow_version.split(".", 1)[0]
        for token in self.deviations:
            name, _, only = token.partition("@")
            if not only or only == major:
                return name
        return None

    @property
    def digest(self) -> str:
        """A sha256 of what Airflow's observations depend on, recorded with them to tell
        them stale: the manifest and the scenario, not `about` or `deviation`."""
        manifest = self.manifest.model_dump(
            mode="json", by_alias=True, exclude={"metadata": {"annotations"}}
        )
        if not manifest["spec"]["params"]:
            del manifest["spec"]["params"]  # added later (spec schema 3): older digests stand
        inputs: dict[str, object] = {
            "manifest": manifest,
            "now": instant(self.now),
            "manual_runs": [instant(when) for when in self.manual_runs],
            "last_run": [instant(when) for when in self.last_run or ()],
        }
        # Added later: left out when unset, so older cases keep their digests.
        if self.observe:
            inputs["observe"] = sorted(self.observe)
        if self.pools:
            inputs["pools"] = [list(pool) for pool in self.pools]
        if self.triggers:
            inputs["triggers"] = [instant(when) for when in self.triggers]
        if self.trigger_conf is not None:
            inputs["trigger_conf"] = self.trigger_conf
        if self.wait is not None:
            inputs["wait"] = self.wait
        if self.backfill is not None:
            inputs["backfill"] = {
                "start": instant(self.backfill.start),
                "end": instant(self.backfill.end),
                "reprocess": self.backfill.reprocess,
                "max_active_runs": self.backfill.max_active_runs,
            }
        if self.action is not None:
            inputs["action"] = {
                "verb": self.action.verb,
                "tasks": list(self.action.tasks),
                "state": self.action.state,
                "downstream": self.action.downstream,
                "upstream": self.action.upstream,
                "only_failed": self.action.only_failed,
                "runs": [instant(when) for when in self.action.runs],
                "after": self.action.after,
            }
        canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def relative_path(self) -> str:
        """The case file's path in the repository (or as given, if elsewhere)."""
        if self.path.is_relative_to(ROOT.parent):
            return str(self.path.relative_to(ROOT.parent))
        return str(self.path)


def load_all(root: Path = CASES) -> list[Case]:
    """Every case under `root`, sorted by area then name; names are unique."""
    cases = [load(path) for path in sorted(root.glob("*/*.yaml"))]
    names = [case.name for case in cases]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise CaseError(f"case names used more than once: {', '.join(duplicates)}")
    return sorted(cases, key=lambda case: (case.area, case.name))


def load(path: Path) -> Case:
    documents = load_dag_documents(path.read_text())
    if len(documents) != 1:
        raise CaseError(f"{path}: a case is exactly one DAG manifest, found {len(documents)}")
    manifest = documents[0]
    if isinstance(manifest, SpecError):
        raise CaseError(f"{path}: {'; '.join(str(issue) for issue in manifest.issues)}")
    name = manifest.metadata.name
    if name != path.stem:
        raise CaseError(f"{path}: the DAG is named {name!r}; name it after its file")
    notes = manifest.metadata.annotations
    unknown = sorted(
        key for key in notes if key.startswith(PREFIX) and key[len(PREFIX) :] not in _ANNOTATIONS
    )
    if unknown:
        raise CaseError(f"{path}: unknown annotation(s) {', '.join(unknown)}")
    about = notes.get(PREFIX + "about")
    now = notes.get(PREFIX + "now")
    area = path.parent.name
    if not about:
        raise CaseError(f"{path}: the annotation {PREFIX}about is required")
    if area in EXECUTED_AREAS:
        scheduled = [key for key in ("now", "manual-runs", "last-run") if PREFIX + key in notes]
        if scheduled:
            raise CaseError(
                f"{path}: a {area} case runs at the real time; drop {PREFIX}"
                f"{', '.join(scheduled)} and give it runs that do not depend on the clock"
            )
    elif not now:
        raise CaseError(f"{path}: the annotation {PREFIX}now is required")
    observe = frozenset(notes.get(PREFIX + "observe", "").split())
    pools = _pools(notes.get(PREFIX + "pools", ""), path)
    triggers = tuple(
        parse_instant(text, path) for text in notes.get(PREFIX + "triggers", "").split()
    )
    trigger_conf = _trigger_conf(notes.get(PREFIX + "trigger-conf"), triggers, path)
    wait_text = notes.get(PREFIX + "wait")
    if wait_text is not None and not wait_text.isdigit():
        raise CaseError(f"{path}: {PREFIX}wait is a whole number of seconds, got {wait_text!r}")
    if (observe or pools or triggers or wait_text) and area not in EXECUTED_AREAS:
        raise CaseError(f"{path}: {PREFIX}observe, pools, triggers and wait are for executed cases")
    if observe - OBSERVABLE:
        raise CaseError(
            f"{path}: {PREFIX}observe: unknown {', '.join(sorted(observe - OBSERVABLE))}; "
            f"known: {', '.join(sorted(OBSERVABLE))}"
        )
    backfill = _backfill(notes, area, path)
    action = _action(notes, area, path, manifest)
    return Case(
        name=name,
        area=area,
        path=path,
        manifest=manifest,
        about=about,
        now=parse_instant(now, path) if now else None,
        manual_runs=tuple(
            parse_instant(text, path) for text in notes.get(PREFIX + "manual-runs", "").split()
        ),
        last_run=_interval(notes.get(PREFIX + "last-run"), path),
        deviations=tuple(notes.get(PREFIX + "deviation", "").split()),
        observe=observe,
        pools=pools,
        triggers=triggers,
        trigger_conf=trigger_conf,
        wait=float(wait_text) if wait_text is not None else None,
        backfill=backfill,
        action=action,
    )


def _trigger_conf(
    text: str | None, triggers: tuple[datetime, ...], where: object
) -> dict[str, Any] | None:
    """The conf of the case's manual runs: a JSON object, only beside `triggers`."""
    if text is None:
        return None
    if not triggers:
        raise CaseError(f"{where}: {PREFIX}trigger-conf is the conf of {PREFIX}triggers' runs")
    try:
        conf = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CaseError(f"{where}: {PREFIX}trigger-conf is not JSON: {exc}") from None
    if not isinstance(conf, dict):
        raise CaseError(f"{where}: {PREFIX}trigger-conf is a JSON object, got {text!r}")
    return conf


def _backfill(notes: dict[str, str], area: str, where: object) -> BackfillAsk | None:
    """The case's backfill: required in the `backfill` area, refused elsewhere."""
    keys = [key for key in _BACKFILL_ANNOTATIONS if PREFIX + key in notes]
    if area != "backfill":
        if keys:
            raise CaseError(f"{where}: {PREFIX}{keys[0]} is for the backfill area's cases")
        return None
    interval = _interval(notes.get(PREFIX + "backfill"), where, "backfill")
    if interval is None:
        raise CaseError(f"{where}: a backfill case needs {PREFIX}backfill: 'START END'")
    start, end = interval
    if start > end:
        raise CaseError(f"{where}: {PREFIX}backfill: START is after END")
    reprocess = notes.get(PREFIX + "backfill-reprocess", "none")
    if reprocess not in REPROCESS_CHOICES:
        raise CaseError(
            f"{where}: {PREFIX}backfill-reprocess is one of {', '.join(REPROCESS_CHOICES)},"
            f" got {reprocess!r}"
        )
    limit_text = notes.get(PREFIX + "backfill-max-active-runs")
    if limit_text is not None and (not limit_text.isdigit() or int(limit_text) < 1):
        raise CaseError(
            f"{where}: {PREFIX}backfill-max-active-runs is a whole number from 1,"
            f" got {limit_text!r}"
        )
    return BackfillAsk(start, end, reprocess, int(limit_text) if limit_text else None)


def _action(
    notes: dict[str, str], area: str, where: object, manifest: DagManifest
) -> ActionAsk | None:
    """The case's clear or mark: one of them required in the `clearing` area, refused
    elsewhere."""
    keys = [key for key in _ACTION_ANNOTATIONS if PREFIX + key in notes]
    if area != "clearing":
        if keys:
            raise CaseError(f"{where}: {PREFIX}{keys[0]} is for the clearing area's cases")
        return None
    verbs = [verb for verb in ("clear", "mark") if PREFIX + verb in notes]
    if len(verbs) != 1:
        raise CaseError(
            f"{where}: a clearing case says either {PREFIX}clear: 'TASKS [OPTION...]' or "
            f"{PREFIX}mark: 'TASK success|failed [OPTION...]'"
        )
    verb = verbs[0]
    words = notes[PREFIX + verb].split()
    if not words:
        raise CaseError(f"{where}: {PREFIX}{verb} names no task (`*` is every task)")
    names = tuple(name for name in words[0].split(",") if name)
    known = {task.name for task in manifest.spec.tasks}
    tasks: tuple[str, ...] = () if names == ("*",) else names
    unknown = sorted(set(tasks) - known)
    if unknown or not names:
        raise CaseError(f"{where}: {PREFIX}{verb}: no task named {', '.join(unknown) or '?'}")
    state = None
    options = words[1:]
    if verb == "mark":
        if len(tasks) != 1:
            raise CaseError(
                f"{where}: {PREFIX}mark names one task (as Airflow's API marks one at a time)"
            )
        if not options or options[0] not in MARK_STATES:
            raise CaseError(f"{where}: {PREFIX}mark: 'TASK success|failed [OPTION...]'")
        state, options = options[0], options[1:]
    allowed = CLEAR_OPTIONS if verb == "clear" else MARK_OPTIONS
    wrong = sorted(set(options) - set(allowed))
    if wrong:
        raise CaseError(
            f"{where}: {PREFIX}{verb}: unknown option(s) {', '.join(wrong)};"
            f" known: {', '.join(allowed)}"
        )
    if not tasks and ({"downstream", "upstream"} & set(options)):
        raise CaseError(f"{where}: {PREFIX}clear: `*` takes every task; drop downstream/upstream")
    after_text = notes.get(PREFIX + "action-after")
    if after_text is not None and not after_text.isdigit():
        raise CaseError(
            f"{where}: {PREFIX}action-after is a whole number of seconds, got {after_text!r}"
        )
    if PREFIX + "wait" in notes:
        raise CaseError(f"{where}: a clearing case waits with {PREFIX}action-after, not wait")
    return ActionAsk(
        verb=verb,
        tasks=tasks,
        state=state,
        downstream="downstream" in options,
        upstream="upstream" in options,
        only_failed="only-failed" in options,
        runs=tuple(
            parse_instant(text, where) for text in notes.get(PREFIX + "action-runs", "").split()
        ),
        after=float(after_text) if after_text is not None else None,
    )


def _pools(text: str, where: object) -> tuple[tuple[str, int], ...]:
    pools = []
    for item in text.split():
        name, _, slots = item.partition("=")
        if not name or not slots.isdigit():
            raise CaseError(f"{where}: pools are NAME=SLOTS, got {item!r}")
        pools.append((name, int(slots)))
    return tuple(pools)


def _interval(
    text: str | None, where: object, key: str = "last-run"
) -> tuple[datetime, datetime] | None:
    if text is None:
        return None
    parts = text.split()
    if len(parts) != 2:
        raise CaseError(f"{where}: {key} is 'START END', got {text!r}")
    start, end = (parse_instant(part, where) for part in parts)
    return start, end


_ANNOTATIONS = (
    "about",
    "now",
    "manual-runs",
    "last-run",
    "deviation",
    "observe",
    "pools",
    "triggers",
    "trigger-conf",
    "wait",
    "backfill",
    "backfill-reprocess",
    "backfill-max-active-runs",
    "clear",
    "mark",
    "action-runs",
    "action-after",
)
_BACKFILL_ANNOTATIONS = ("backfill", "backfill-reprocess", "backfill-max-active-runs")
_ACTION_ANNOTATIONS = ("clear", "mark", "action-runs", "action-after")


def parse_instant(text: str, where: object = "") -> datetime:
    """An ISO 8601 instant with its offset, as UTC (a naive one is refused)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise CaseError(f"{where}: {text!r} is not an ISO 8601 instant") from None
    if value.tzinfo is None:
        raise CaseError(f"{where}: {text!r} has no UTC offset; write e.g. 2026-12-01T00:00:00Z")
    return value.astimezone(UTC)


def instant(value: datetime | None) -> str | None:
    """The one spelling both sides' observations use: UTC, seconds, `Z`."""
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value.isoformat()} in an observation")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") + (
        f".{value.microsecond:06d}Z" if value.microsecond else "Z"
    )
