"""One Airflow task, as a Sluice task: its operator's command and the scheduling knobs.

`BashOperator` becomes `sh -c SCRIPT` in the converter's image (templates
rewritten by `templates`), `KubernetesPodOperator` its own image, command,
arguments, env and resources, `EmptyOperator` a task that does nothing. The
BaseOperator arguments Sluice has (retries, pools, trigger rules...) map one
to one; descriptive ones (owner, docs, email) are notes; the rest are gaps.
A task whose command cannot be converted (a Python callable, a sensor, a
template with no Sluice form) is kept as a placeholder that fails saying why,
so the graph around it (its edges, trigger rules) stays the one Airflow had
and nothing downstream runs as if it had succeeded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sluice.convert import params, templates
from sluice.convert.findings import Finding
from sluice.convert.reading import TaskDef
from sluice.convert.values import Symbol, Unknown
from sluice.spec import names
from sluice.spec.durations import format_duration
from sluice.spec.models import TriggerRule, WeightRule

SHELL = ["sh", "-c"]
DEFAULT_POOL = "default_pool"
_TRIGGER_ALIASES = {"none_failed_or_skipped": "none_failed_min_one_success", "dummy": "always"}

# Arguments with no effect on how Sluice runs a task: kept out, with a note.
DESCRIPTIVE = frozenset(
    {
        "owner",
        "email",
        "email_on_failure",
        "email_on_retry",
        "doc",
        "doc_md",
        "doc_rst",
        "doc_json",
        "doc_yaml",
        "task_display_name",
        "queue",
        "do_xcom_push",
        "multiple_outputs",
        "output_encoding",
        "start_date",
        "end_date",
        "params",
        "dag",
        "task_id",
        "task_group",
        "name",
        "namespace",
        "get_logs",
        "is_delete_operator_pod",
        "on_finish_action",
        "in_cluster",
        "config_file",
        "cluster_context",
        "kubernetes_conn_id",
        "startup_timeout_seconds",
        "random_name_suffix",
        "log_events_on_failure",
        "reattach_on_restart",
        "append_env",
    }
)
_WHY_DESCRIPTIVE = {
    "name": "Sluice names each try's Job and pod itself",
    "namespace": "a task runs in its DAG's namespace (ADR 0032)",
    "in_cluster": "Sluice runs tasks in the cluster it runs in",
    "config_file": "Sluice runs tasks in the cluster it runs in",
    "cluster_context": "Sluice runs tasks in the cluster it runs in",
    "kubernetes_conn_id": "Sluice runs tasks in the cluster it runs in",
    "is_delete_operator_pod": "Sluice keeps a try's pod as its Job's TTL says (ADR 0037)",
    "on_finish_action": "Sluice keeps a try's pod as its Job's TTL says (ADR 0037)",
    "get_logs": "Sluice archives every try's log",
    "do_xcom_push": "Sluice has no XCom; nothing reads the pushed value here",
    "queue": "Sluice has no executor queues",
    "start_date": "the DAG's start date decides the runs",
    "end_date": "the DAG's end date decides the runs",
}


@dataclass(frozen=True)
class Field:
    """A BaseOperator argument Sluice has: its manifest key and how its value maps."""

    key: str
    convert: Callable[[Any], Any]


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected True or False, got {value!r}")
    return value


def _duration(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise ValueError(f"expected a timedelta or seconds, got {value!r}")
    seconds = value if isinstance(value, timedelta) else timedelta(seconds=value)
    return format_duration(seconds)


def _enum_name(value: Any) -> str:
    if isinstance(value, Symbol):
        return value.last.lower()
    if isinstance(value, str):
        return value
    raise ValueError(f"expected a rule name, got {value!r}")


def _trigger_rule(value: Any) -> str:
    name = _enum_name(value)
    name = _TRIGGER_ALIASES.get(name, name)
    if name not in TriggerRule.__members__.values():
        raise ValueError(
            f"trigger rule {name!r} has no Sluice equivalent; Sluice has "
            + ", ".join(rule.value for rule in TriggerRule)
        )
    return name


def _weight_rule(value: Any) -> str:
    name = _enum_name(value)
    if name not in WeightRule.__members__.values():
        raise ValueError(f"weight rule {name!r} has no Sluice equivalent (a custom strategy)")
    return name


def _exit_codes(value: Any) -> list[int]:
    if value is None:
        return []
    codes = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(codes, list | tuple) or not all(isinstance(c, int) for c in codes):
        raise ValueError(f"expected exit codes, got {value!r}")
    return list(codes)


def _pool(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a pool name, got {value!r}")
    return "default" if value == DEFAULT_POOL else pool_name(value)


def pool_name(airflow_pool: str) -> str:
    """A Pool object's name for an Airflow pool (lowercase, `_` as `-`)."""
    if names.dns_subdomain_problem(airflow_pool) is None:
        return airflow_pool
    return names.suggest_label(airflow_pool.replace(".", "-"))


FIELDS: dict[str, Field] = {
    "retries": Field("retries", _int),
    "retry_delay": Field("retryDelay", _duration),
    "retry_exponential_backoff": Field("retryExponentialBackoff", _bool),
    "max_retry_delay": Field("maxRetryDelay", _duration),
    "execution_timeout": Field("executionTimeout", _duration),
    "trigger_rule": Field("triggerRule", _trigger_rule),
    "pool": Field("pool", _pool),
    "pool_slots": Field("poolSlots", _int),
    "priority_weight": Field("priorityWeight", _int),
    "weight_rule": Field("weightRule", _weight_rule),
    "depends_on_past": Field("dependsOnPast", _bool),
    "wait_for_downstream": Field("waitForDownstream", _bool),
}
_COMMAND_ARGS = {
    "BashOperator": frozenset(
        {"bash_command", "env", "skip_on_exit_code", "append_env", "output_encoding"}
    ),
    "KubernetesPodOperator": frozenset(
        {
            "image",
            "cmds",
            "arguments",
            "env_vars",
            "container_resources",
            "resources",
            "labels",
            "annotations",
            "node_selector",
            "image_pull_policy",
            "skip_on_exit_code",
        }
    ),
    "EmptyOperator": frozenset(),
    "DummyOperator": frozenset(),
}
_SENSOR_WHY = (
    "sensors wait on the outside world inside Airflow; Sluice has none: trigger the DAG when "
    "the data is there (`sluice dags trigger`, a DagRun object), or poll in a task with retries"
)


@dataclass
class Converted:
    """A task's manifest entry and what was said about it."""

    entry: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    placeholder: bool = False
    shell: bool = True  # runs `sh -c` in the converter's image (so defaults may say so)


class TaskConverter:
    def __init__(self, task: TaskDef, path: str, image: str, dag_params: params.DagParams) -> None:
        self.task = task
        self.path = path
        self.image = image
        self.dag_params = dag_params
        self.findings: list[Finding] = []
        self.command_gaps: list[str] = []

    def gap(self, message: str, argument: str | None = None) -> None:
        self._find("gap", message, argument)

    def note(self, message: str, argument: str | None = None) -> None:
        self._find("note", message, argument)

    def _find(self, kind: str, message: str, argument: str | None) -> None:
        line = self.task.lines.get(argument, self.task.line) if argument else self.task.line
        dag = self.task.dag.dag_id if isinstance(self.task.dag.dag_id, str) else None
        self.findings.append(
            Finding(kind, self.path, line, message, dag, self.task.task_id)  # type: ignore[arg-type]
        )

    def argument(self, name: str) -> Any:
        """The task's own argument, else its DAG's (and group's) default_args, else None."""
        if name in self.task.kwargs:
            return self.task.kwargs[name]
        return self.task.default_args.get(name)

    def given(self, name: str) -> bool:
        return name in self.task.kwargs or name in self.task.default_args

    # -- the whole task -----------------------------------------------------------------

    def convert(self, fields: Mapping[str, Any]) -> Converted:
        """`fields`: the BaseOperator fields the DAG's `defaults` already say (key -> value)."""
        operator = self.task.operator_name
        entry: dict[str, Any] = {"name": names.suggest_label(self.task.task_id)}
        shell = True
        why = self._refusal(operator)
        if why is None:
            if operator == "BashOperator":
                entry.update(self._bash())
            elif operator == "KubernetesPodOperator":
                entry.update(self._pod())
                shell = False
            else:
                entry["args"] = ["true"]  # EmptyOperator: nothing to run
        else:
            self.command_gaps.append(why)
        placeholder = bool(self.command_gaps)
        if placeholder:
            for message in self.command_gaps:
                self.gap(message)
            entry = {
                "name": entry["name"],
                "args": [_placeholder_script(self.task.task_id, self.command_gaps)],
            }
            shell = True
        entry.update(self._base_fields(fields, operator))
        if placeholder and (entry.get("retries") or fields.get("retries")):
            entry["retries"] = 0  # it can only fail
        self._leftovers(operator)
        return Converted(entry, self.findings, placeholder, shell)

    def _refusal(self, operator: str) -> str | None:
        if self.task.refused:
            return self.task.refused
        if operator in _COMMAND_ARGS:
            return None
        if operator.endswith("Sensor"):
            return f"{operator}: {_SENSOR_WHY}"
        if "Python" in operator or operator in ("ShortCircuitOperator",):
            return (
                f"{operator} runs a Python callable in Airflow's worker; Sluice runs "
                "containers: put the code in an image and run it with a command"
            )
        return (
            f"{operator} has no Sluice equivalent; the converter maps BashOperator, "
            "KubernetesPodOperator and EmptyOperator: rewrite it as one of them"
        )

    def _base_fields(self, fields: Mapping[str, Any], operator: str) -> dict[str, Any]:
        entry: dict[str, Any] = {}
        for argument, spec in FIELDS.items():
            if not self.given(argument):
                continue
            value = self._mapped(argument, spec)
            if value is None or (spec.key in fields and fields[spec.key] == value):
                continue  # unreadable (a gap), or the DAG's defaults say it already
            entry[spec.key] = value
            if argument == "pool" and isinstance(self.argument("pool"), str):
                original = self.argument("pool")
                if original not in (DEFAULT_POOL, value):
                    self.note(f"pool {original!r} is the Pool object {value!r}", "pool")
        skip = "skip_on_exit_code"
        if operator in ("BashOperator", "KubernetesPodOperator") and self.given(skip):
            value = self._mapped(skip, Field("skipOnExitCode", _exit_codes))
            if value is not None and value != [99]:
                entry["skipOnExitCode"] = value
        elif operator == "KubernetesPodOperator":
            entry["skipOnExitCode"] = []  # KubernetesPodOperator skips on no exit code
        return entry

    def _mapped(self, argument: str, spec: Field) -> Any:
        value = self.argument(argument)
        # A bad DAG-wide default is reported once, by the DAG, not by each of its tasks.
        dag_defaults = self.task.dag.default_args
        reported = (
            argument not in self.task.kwargs
            and isinstance(dag_defaults, Mapping)
            and dag_defaults.get(argument) is value
        )
        if isinstance(value, Unknown):
            if not reported:
                self.gap(f"{argument}: {value.why}", argument)
            return None
        try:
            return spec.convert(value)
        except (ValueError, TypeError) as error:
            if not reported:
                self.gap(f"{argument}: {error}", argument)
            return None

    def _leftovers(self, operator: str) -> None:
        handled = set(FIELDS) | _COMMAND_ARGS.get(operator, frozenset()) | {"skip_on_exit_code"}
        for argument in self.task.kwargs:
            if argument in handled:
                continue
            if argument in DESCRIPTIVE:
                if argument not in ("dag", "task_id", "params", "task_group"):
                    why = _WHY_DESCRIPTIVE.get(argument, "it does not change how the task runs")
                    self.note(f"{argument} is not carried over: {why}", argument)
            elif operator in _COMMAND_ARGS:
                self.gap(f"{argument} has no Sluice equivalent here", argument)

    # -- BashOperator -------------------------------------------------------------------

    def _template(
        self, text: str, argument: str, no_variables: str | None = None
    ) -> templates.Template:
        """`text` parsed; `no_variables` says why no variable can be read where it goes."""
        task_params = params.for_task(self.dag_params, self.argument("params"))
        if no_variables is not None:
            task_params = task_params.without_variables(no_variables)
        parsed = templates.parse(text, task_params)
        for message in parsed.problems:
            self.command_gaps.append(f"{argument}: {message}")
        for message in parsed.notes:
            self.note(message, argument)
        renamed_task = names.suggest_label(self.task.task_id) != self.task.task_id
        dag_id = self.task.dag.dag_id
        renamed_dag = isinstance(dag_id, str) and names.suggest_label(dag_id) != dag_id
        if ("SLUICE_TASK" in parsed.uses and renamed_task) or (
            "SLUICE_DAG" in parsed.uses and renamed_dag
        ):
            self.note(
                f"{argument}: the DAG or task id it reads is Sluice's (renamed) name", argument
            )
        return parsed

    def _bash(self) -> dict[str, Any]:
        command = self.argument("bash_command")
        if isinstance(command, Unknown):
            self.command_gaps.append(f"bash_command: {command.why}")
            return {}
        if not isinstance(command, str):
            self.command_gaps.append("bash_command is not a string read statically")
            return {}
        if command.endswith((".sh", ".bash")):
            self.command_gaps.append(
                f"bash_command {command!r} names a script file Airflow loads as a template; "
                "Sluice has no template files: put the script in the image and run it"
            )
            return {}
        script = templates.shell_script(self._template(command, "bash_command"))
        env, exports = self._bash_env()
        if self.argument("append_env") is False and self.given("env"):
            self.note(
                "append_env=False: Airflow's task saw only `env`; a Sluice task also sees its "
                "image's environment and SLUICE_*",
                "append_env",
            )
        entry: dict[str, Any] = {"args": ["".join(exports) + script]}
        if env:
            entry["env"] = env
        return entry

    def _bash_env(self) -> tuple[list[dict[str, str]], list[str]]:
        value = self.argument("env")
        if value is None:
            return [], []
        if isinstance(value, Unknown) or not isinstance(value, Mapping):
            why = value.why if isinstance(value, Unknown) else "not a dict"
            self.command_gaps.append(f"env: {why}")
            return [], []
        env: list[dict[str, str]] = []
        exports: list[str] = []
        for name, raw in value.items():
            if isinstance(raw, Unknown):
                self.command_gaps.append(f"env {name!r}: {raw.why}")
                continue
            parsed = self._template(str(raw), f"env {name!r}")
            if _is_identity(name, parsed):
                continue  # the run context Sluice sets under that very name
            if str(name).startswith("SLUICE_"):
                self.command_gaps.append(
                    f"env {name!r}: SLUICE_* names are Sluice's run context; rename it"
                )
            elif parsed.is_plain:
                env.append({"name": str(name), "value": "".join(map(str, parsed.pieces))})
            else:
                exports.append(f"export {name}={templates.shell_word(parsed)}\n")
        return env, exports

    # -- KubernetesPodOperator ----------------------------------------------------------

    def _pod(self) -> dict[str, Any]:
        entry: dict[str, Any] = {}
        image = self.argument("image")
        if not isinstance(image, str):
            self.command_gaps.append(
                "image: "
                + (image.why if isinstance(image, Unknown) else "not a string read statically")
            )
        else:
            entry["image"] = self._kubernetes(
                image, "image", "Kubernetes expands no variable in an image name"
            )
        entry["command"] = self._strings("cmds")
        entry["args"] = self._strings("arguments")
        env = self._pod_env()
        if env:
            entry["env"] = env
        resources = self.argument("container_resources") or self.argument("resources")
        if resources:
            if isinstance(resources, Mapping):
                entry["resources"] = {
                    kind: {k: str(v) for k, v in amounts.items()}
                    for kind, amounts in resources.items()
                    if amounts
                }
            else:
                self.gap("container_resources: not read statically", "container_resources")
        template = self._pod_template()
        if template:
            entry["podTemplate"] = template
        return entry

    def _kubernetes(self, text: str, argument: str, no_variables: str | None = None) -> str:
        parsed = self._template(text, argument, no_variables)
        converted, why = templates.kubernetes_text(parsed)
        if converted is None:
            self.command_gaps.append(f"{argument}: {why}")
            return text
        return converted

    def _strings(self, argument: str) -> list[str]:
        value = self.argument(argument)
        if value is None:
            return []
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            self.command_gaps.append(f"{argument}: not a list of strings read statically")
            return []
        return [self._kubernetes(item, argument) for item in value]

    def _pod_env(self) -> list[dict[str, str]]:
        value = self.argument("env_vars")
        if value is None:
            return []
        items: list[tuple[Any, Any]]
        if isinstance(value, Mapping):
            items = list(value.items())
        elif isinstance(value, list) and all(isinstance(v, Mapping) for v in value):
            items = [(v.get("name"), v.get("value", "")) for v in value]
        else:
            why = value.why if isinstance(value, Unknown) else "not a dict or list of V1EnvVar"
            self.command_gaps.append(f"env_vars: {why}")
            return []
        env = []
        for name, raw in items:
            if isinstance(raw, Unknown):
                self.command_gaps.append(f"env_vars {name!r}: {raw.why}")
                continue
            parsed = self._template(
                str(raw),
                f"env_vars {name!r}",
                "a pod's env cannot read the run context, which Kubernetes sets after it",
            )
            if _is_identity(name, parsed):
                continue
            if not parsed.is_plain:
                self.command_gaps.append(
                    f"env_vars {name!r}: a templated env var in a pod: Kubernetes expands "
                    "$(VAR) only from variables listed before it, and Sluice's run context "
                    "comes last; read SLUICE_* in the program instead"
                )
                continue
            env.append({"name": str(name), "value": "".join(map(str, parsed.pieces))})
        return env

    def _pod_template(self) -> dict[str, Any]:
        template: dict[str, Any] = {}
        metadata = {
            key: self.argument(key)
            for key in ("labels", "annotations")
            if isinstance(self.argument(key), Mapping) and self.argument(key)
        }
        if metadata:
            template["metadata"] = metadata
        spec: dict[str, Any] = {}
        selector = self.argument("node_selector")
        if isinstance(selector, Mapping) and selector:
            spec["nodeSelector"] = dict(selector)
        policy = self.argument("image_pull_policy")
        if isinstance(policy, str):
            spec["containers"] = [{"name": "main", "imagePullPolicy": policy}]
        if spec:
            template["spec"] = spec
        return template


def _is_identity(name: Any, parsed: templates.Template) -> bool:
    """`SLUICE_X: '{{ ... }}'` whose template reads exactly $SLUICE_X: already set so."""
    return parsed.pieces == [templates.ContextValue(str(name))]


def _placeholder_script(task_id: str, reasons: list[str]) -> str:
    message = f"sluice convert: task {task_id} was not converted: " + "; ".join(reasons)
    for char in '\\"$`':
        message = message.replace(char, "\\" + char)
    return f'echo "{message}" >&2; exit 1'
