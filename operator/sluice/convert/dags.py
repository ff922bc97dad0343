"""One Airflow DAG, as a Sluice DAG manifest (a dict `DagManifest` validates).

The DAG's arguments map onto `spec` (schedule, time zone from the start
date, catchup, limits, timeouts), its `default_args` onto `spec.defaults`,
each task through `tasks`, and each edge into the downstream task's
`dependsOn`. Where Airflow and Sluice differ in a default (catchup on
Airflow 2, a cron schedule's meaning on Airflow 3), a note says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sluice.convert import params, tasks
from sluice.convert.findings import Finding
from sluice.convert.reading import DagDef
from sluice.convert.values import Unknown, zone_name
from sluice.spec import names, schedules
from sluice.spec.durations import format_duration
from sluice.spec.models import API_VERSION, KIND

AIRFLOW_DAG_ID = "sluice.io/airflow-dag-id"
CONVERTED_FROM = "sluice.io/converted-from"
_PRESETS = {"@annually": "@yearly", "@quarterly": "0 0 1 */3 *", "@midnight": "@daily"}
_DESCRIPTIVE = frozenset(
    {
        "description",
        "tags",
        "doc_md",
        "owner_links",
        "dag_display_name",
        "access_control",
        "default_view",
        "orientation",
        "template_searchpath",
        "user_defined_macros",
        "user_defined_filters",
        "jinja_environment_kwargs",
        "render_template_as_native_obj",
    }
)
_CONSUMED = frozenset(
    {
        "dag_id",
        "schedule",
        "schedule_interval",
        "timetable",
        "start_date",
        "end_date",
        "catchup",
        "max_active_runs",
        "max_active_tasks",
        "concurrency",
        "dagrun_timeout",
        "default_args",
        "params",
        "is_paused_upon_creation",
    }
)
_TASK_ARGUMENTS = (
    set(tasks.FIELDS)
    | set(tasks.DESCRIPTIVE)
    | {arg for args in tasks._COMMAND_ARGS.values() for arg in args}
    | {"skip_on_exit_code"}
)


@dataclass
class ConvertedDag:
    path: str
    dag_id: str
    name: str
    line: int
    manifest: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)  # the DAG's own
    task_findings: dict[str, list[Finding]] = field(default_factory=dict)  # by Sluice name

    @property
    def all_findings(self) -> list[Finding]:
        found = list(self.findings)
        for task_found in self.task_findings.values():
            found.extend(task_found)
        return found


class DagConverter:
    def __init__(self, dag: DagDef, path: str, image: str) -> None:
        self.dag = dag
        self.path = path
        self.image = image
        self.dag_id = dag.dag_id if isinstance(dag.dag_id, str) else "?"
        self.findings: list[Finding] = list(dag.findings)

    def gap(self, message: str, argument: str | None = None) -> None:
        self._find("gap", message, argument)

    def note(self, message: str, argument: str | None = None) -> None:
        self._find("note", message, argument)

    def _find(self, kind: str, message: str, argument: str | None) -> None:
        line = self.dag.lines.get(argument, self.dag.line) if argument else self.dag.line
        self.findings.append(Finding(kind, self.path, line, message, self.dag_id))  # type: ignore[arg-type]

    def argument(self, name: str) -> Any:
        if name in self.dag.kwargs:
            return self.dag.kwargs[name]
        defaults = self.dag.default_args
        if name in ("start_date", "end_date") and isinstance(defaults, Mapping):
            return defaults.get(name)
        return None

    def convert(self) -> ConvertedDag | None:
        if not isinstance(self.dag.dag_id, str):
            why = self.dag.dag_id.why if isinstance(self.dag.dag_id, Unknown) else "not a string"
            self.gap(f"the DAG's dag_id is not read statically: {why}")
            return None
        name = names.suggest_label(self.dag_id)
        if name != self.dag_id:
            self.note(f"DAG {self.dag_id!r} is named {name!r} (Kubernetes names)")
        spec: dict[str, Any] = {}
        self._schedule(spec)
        self._limits(spec)
        defaults = self._defaults()
        dag_params = self._params()
        converted = self._tasks(defaults, dag_params)
        if converted is None:
            return None
        entries, task_findings, all_shell = converted
        shell_defaults = {"image": self.image, "command": list(tasks.SHELL)}
        for entry, shell in entries:
            if shell and not all_shell:
                entry.update(
                    {key: value for key, value in shell_defaults.items() if key not in entry}
                )
        if all_shell:
            defaults = {**shell_defaults, **defaults}
        if defaults:
            spec["defaults"] = defaults
        if dag_params.spec:
            spec["params"] = dag_params.spec
        spec["tasks"] = [_ordered(entry) for entry, _ in entries]
        manifest = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": name,
                "annotations": {AIRFLOW_DAG_ID: self.dag_id, CONVERTED_FROM: self.path},
            },
            "spec": spec,
        }
        self._leftovers()
        return ConvertedDag(
            self.path, self.dag_id, name, self.dag.line, manifest, self.findings, task_findings
        )

    # -- the DAG's own fields -----------------------------------------------------------

    def _schedule(self, spec: dict[str, Any]) -> None:
        start = self._date("start_date")
        end = self._date("end_date")
        zone = "UTC"
        if start is not None:
            zone = zone_name(start.tzinfo) or "UTC"
            if start.tzinfo is None:
                self.note(
                    "start_date has no time zone: read as UTC (Airflow's default_timezone)",
                    "start_date",
                )
                start = start.replace(tzinfo=UTC)
            elif zone_name(start.tzinfo) is None:
                self.gap(
                    "start_date's time zone is a fixed offset; use an IANA zone name", "start_date"
                )
        if end is not None and end.tzinfo is None:
            end = end.replace(tzinfo=UTC)
        key = "schedule" if "schedule" in self.dag.kwargs else "schedule_interval"
        if key not in self.dag.kwargs and "timetable" in self.dag.kwargs:
            key = "timetable"
        value = self.dag.kwargs.get(key)
        if key not in self.dag.kwargs:
            self.note(
                "no schedule given: written as manual runs only (Airflow 3's default); Airflow 2 "
                "would run it daily: add `schedule` if that is what you want"
            )
        cron = self._cron(value, key, start, zone)
        if cron is not None and start is None:
            self.gap(
                f"schedule {cron!r} needs a start date: written as manual runs only "
                "(schedule: null) until you give start_date a fixed date",
                key,
            )
            cron = None
        spec["schedule"] = cron
        if zone != "UTC":
            spec["timezone"] = zone
        if start is not None:
            spec["startDate"] = _instant(start)
        if end is not None:
            spec["endDate"] = _instant(end)
        catchup = self.dag.kwargs.get("catchup")
        if "catchup" not in self.dag.kwargs:
            if cron not in (None, "@once"):
                self.note(
                    "catchup not given: Sluice's default (false) is Airflow 3's; Airflow 2 "
                    "catches up by default ([scheduler] catchup_by_default)"
                )
        elif isinstance(catchup, bool):
            spec["catchup"] = catchup
        else:
            self.gap(f"catchup is not True or False: {_why(catchup)}", "catchup")
        if self.dag.airflow3 and cron not in (None, "@once"):
            self.note(
                "on Airflow 3 a cron schedule makes runs at each tick with no data interval "
                "unless [scheduler] create_cron_data_intervals is True; Sluice's runs cover "
                "data intervals (as Airflow 2's and that setting's do)",
                key,
            )

    def _cron(self, value: Any, key: str, start: datetime | None, zone: str) -> str | None:
        if value is None:
            return None
        if isinstance(value, Mapping) and value.get("timetable") == "cron":
            cron, timezone = value.get("cron"), value.get("timezone")
            if isinstance(timezone, str) and timezone != zone:
                self.gap("the timetable's time zone differs from the start date's", key)
            return self._cron(cron, key, start, zone)
        if isinstance(value, timedelta):
            return self._delta(value, key, start, zone)
        if not isinstance(value, str):
            self.gap(f"{key} is not a cron expression or preset: {_why(value)}", key)
            return None
        text = _PRESETS.get(value.strip(), value.strip())
        if text == "@continuous":
            self.gap("@continuous (a new run as soon as one ends) has no Sluice equivalent", key)
            return None
        problem = schedules.schedule_problem(text)
        if problem:
            self.gap(problem, key)
            return None
        return text

    def _delta(self, delta: timedelta, key: str, start: datetime | None, zone: str) -> str | None:
        """A timedelta schedule as the cron with the same intervals, where there is one."""
        cron = _delta_cron(delta, start) if start is not None and zone == "UTC" else None
        if cron is None or self.dag.kwargs.get("catchup") is not True:
            self.gap(
                f"{key}=timedelta({format_duration(delta)}): Sluice schedules are cron "
                "expressions; a timedelta converts only with catchup=True, a UTC start date "
                "on the delta's grid and a delta that divides an hour or a day (or is 1 or 7 "
                "days), where the intervals are the same: write the cron schedule you mean",
                key,
            )
            return None
        self.note(
            f"timedelta({format_duration(delta)}) became {cron!r}: the same intervals "
            "from this start date",
            key,
        )
        return cron

    def _date(self, argument: str) -> datetime | None:
        value = self.argument(argument)
        if value is None:
            return None
        if isinstance(value, datetime):
            return value
        self.gap(f"{argument} is not a date read statically: {_why(value)}", argument)
        return None

    def _limits(self, spec: dict[str, Any]) -> None:
        for argument, key in (
            ("max_active_runs", "maxActiveRuns"),
            ("max_active_tasks", "maxActiveTasks"),
            ("concurrency", "maxActiveTasks"),
        ):
            if argument not in self.dag.kwargs:
                continue
            value = self.dag.kwargs[argument]
            if isinstance(value, int) and not isinstance(value, bool):
                spec[key] = value
            else:
                self.gap(f"{argument} is not a whole number: {_why(value)}", argument)
        if "dagrun_timeout" in self.dag.kwargs:
            value = self.dag.kwargs["dagrun_timeout"]
            if isinstance(value, timedelta):
                spec["dagrunTimeout"] = format_duration(value)
            elif value is not None:
                self.gap(f"dagrun_timeout is not a timedelta: {_why(value)}", "dagrun_timeout")
        paused = self.dag.kwargs.get("is_paused_upon_creation")
        if isinstance(paused, bool):
            spec["paused"] = paused

    def _defaults(self) -> dict[str, Any]:
        default_args = self.dag.default_args
        if isinstance(default_args, Unknown) or not isinstance(default_args, Mapping):
            self.gap(
                f"default_args is not a dict read statically: {_why(default_args)}", "default_args"
            )
            return {}
        defaults: dict[str, Any] = {}
        for argument, spec in tasks.FIELDS.items():
            if argument not in default_args:
                continue
            value = default_args[argument]
            try:
                if isinstance(value, Unknown):
                    raise ValueError(value.why)
                defaults[spec.key] = spec.convert(value)
            except (ValueError, TypeError) as error:
                self.gap(f"default_args[{argument!r}]: {error}", "default_args")
        for argument in default_args:
            if argument in tasks.FIELDS:
                continue
            if argument in tasks.DESCRIPTIVE or argument in _TASK_ARGUMENTS:
                if argument in tasks.DESCRIPTIVE and argument not in (
                    "start_date",
                    "end_date",
                    "params",
                ):
                    self.note(
                        f"default_args[{argument!r}] is not carried over: it does not "
                        "change how a task runs",
                        "default_args",
                    )
                continue
            self.gap(f"default_args[{argument!r}] has no Sluice equivalent", "default_args")
        return defaults

    def _params(self) -> params.DagParams:
        """`params=` and `default_args["params"]` (over them, as Airflow merges them)."""
        default_args = self.dag.default_args
        from_default_args = (
            default_args.get("params") if isinstance(default_args, Mapping) else None
        )
        found = params.dag_params(self.dag.kwargs.get("params"), from_default_args)
        for kind, message in found.findings:
            argument = "params" if "params" in self.dag.kwargs else "default_args"
            self._find(kind, message, argument)
        return found

    def _tasks(
        self, defaults: dict[str, Any], dag_params: params.DagParams
    ) -> tuple[list[tuple[dict[str, Any], bool]], dict[str, list[Finding]], bool] | None:
        if not self.dag.tasks:
            self.gap("the DAG has no tasks the converter could read; Sluice needs at least one")
            return None
        upstream: dict[str, list[str]] = {}
        for up, down in self.dag.edges:
            upstream.setdefault(down.task_id, []).append(names.suggest_label(up.task_id))
        entries: list[tuple[dict[str, Any], bool]] = []
        by_name: dict[str, list[Finding]] = {}
        seen: dict[str, str] = {}
        all_shell = True
        for task in self.dag.tasks.values():
            converter = tasks.TaskConverter(task, self.path, self.image, dag_params)
            result = converter.convert(defaults)
            name = result.entry["name"]
            if name in seen:
                self.gap(
                    f"tasks {seen[name]!r} and {task.task_id!r} both become {name!r}; "
                    "rename one of them"
                )
            seen[name] = task.task_id
            if name != task.task_id:
                result.findings.insert(
                    0,
                    Finding(
                        "note",
                        self.path,
                        task.line,
                        f"task {task.task_id!r} is named {name!r}",
                        self.dag_id,
                        task.task_id,
                    ),
                )
            if task.task_id in upstream:
                result.entry["dependsOn"] = upstream[task.task_id]
            entries.append((result.entry, result.shell))
            by_name[name] = result.findings
            all_shell = all_shell and result.shell
        return entries, by_name, all_shell

    def _leftovers(self) -> None:
        for argument in self.dag.kwargs:
            if argument in _CONSUMED:
                continue
            if argument in _DESCRIPTIVE:
                self.note(
                    f"{argument} is not carried over: it does not change how runs are scheduled",
                    argument,
                )
            else:
                self.gap(f"{argument} has no Sluice equivalent", argument)


def _delta_cron(delta: timedelta, start: datetime) -> str | None:
    start = start.astimezone(UTC)
    seconds = int(delta.total_seconds())
    if delta.total_seconds() != seconds or seconds <= 0 or start.second or start.microsecond:
        return None
    minutes, hours = seconds // 60, seconds // 3600
    if seconds % 60 == 0 and minutes < 60 and 60 % minutes == 0 and start.minute % minutes == 0:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    if seconds % 3600 == 0 and hours < 24 and 24 % hours == 0 and start.hour % hours == 0:
        return f"{start.minute} {'*' if hours == 1 else f'*/{hours}'} * * *"
    if seconds == 86400:
        return f"{start.minute} {start.hour} * * *"
    if seconds == 7 * 86400:
        return f"{start.minute} {start.hour} * * {(start.weekday() + 1) % 7}"
    return None


def _instant(value: datetime) -> str:
    if zone_name(value.tzinfo) == "UTC":
        return (
            value.strftime("%Y-%m-%dT%H:%M:%S")
            + (f".{value.microsecond:06d}" if value.microsecond else "")
            + "Z"
        )
    return value.isoformat()


def _why(value: Any) -> str:
    return value.why if isinstance(value, Unknown) else repr(value)


_ORDER = ("name", "dependsOn", "image", "command", "args", "env", "resources", "triggerRule")


def _ordered(entry: dict[str, Any]) -> dict[str, Any]:
    """A task's keys in the order people read them: name, edges, what runs, then knobs."""
    first = {key: entry[key] for key in _ORDER if key in entry}
    return {**first, **{key: value for key, value in entry.items() if key not in first}}
