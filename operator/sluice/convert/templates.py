"""Airflow's template context, rewritten onto the run context a Sluice task sees.

Airflow renders Jinja templates in a task's command and environment before it
runs; Sluice has no template engine: a task reads its run from `SLUICE_*`
environment variables (ADR 0003's "no template engine", docs/architecture.md).
So a template is parsed with Jinja's own parser (parsed, never rendered) and
each expression becomes a reference to one of those variables: `{{ ts }}` is
`$SLUICE_LOGICAL_DATE` as it is, `{{ ds }}` its date part, `{{ ts_nodash }}`
its fields rearranged by `sed`. Shell text gets shell expansions placed
according to the quoting at that point; a Kubernetes argument gets `$(VAR)`,
which only names a whole variable. What has no such form (`macros`, XCom,
Variables, one key of the conf, date arithmetic) is a problem, with why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import jinja2
from jinja2 import nodes

from sluice.convert.params import TemplateParams
from sluice.convert.values import Unknown
from sluice.spec import params as run_params

LOGICAL = "SLUICE_LOGICAL_DATE"
START = "SLUICE_DATA_INTERVAL_START"
END = "SLUICE_DATA_INTERVAL_END"
DATES = (LOGICAL, START, END)

# What the names of Airflow's context read, as Sluice's run context (executors.base).
_NAMES: dict[tuple[str, ...], str] = {
    ("ts",): LOGICAL,
    ("logical_date",): LOGICAL,
    ("execution_date",): LOGICAL,
    ("dag_run", "logical_date"): LOGICAL,
    ("dag_run", "execution_date"): LOGICAL,
    ("data_interval_start",): START,
    ("data_interval_end",): END,
    ("dag_run", "data_interval_start"): START,
    ("dag_run", "data_interval_end"): END,
    ("run_id",): "SLUICE_RUN_ID",
    ("dag_run", "run_id"): "SLUICE_RUN_ID",
    ("ti", "run_id"): "SLUICE_RUN_ID",
    ("task_instance", "run_id"): "SLUICE_RUN_ID",
    ("dag", "dag_id"): "SLUICE_DAG",
    ("dag_run", "dag_id"): "SLUICE_DAG",
    ("ti", "dag_id"): "SLUICE_DAG",
    ("task_instance", "dag_id"): "SLUICE_DAG",
    ("task", "task_id"): "SLUICE_TASK",
    ("ti", "task_id"): "SLUICE_TASK",
    ("task_instance", "task_id"): "SLUICE_TASK",
    ("ti", "try_number"): "SLUICE_TRY_NUMBER",
    ("task_instance", "try_number"): "SLUICE_TRY_NUMBER",
    ("dag_run", "conf"): "SLUICE_CONF",
}
# Airflow's date strings, as strftime formats over the instant (its `ds`, `ts_nodash`...).
_DATE_FORMATS = {
    "ds": "%Y-%m-%d",
    "ds_nodash": "%Y%m%d",
    "ts": None,
    "ts_nodash": "%Y%m%dT%H%M%S",
    "ts_nodash_with_tz": "%Y%m%dT%H%M%S%z",
}
_REFUSED = {
    "macros": "Airflow macros compute in Python at render time; compute it in the command "
    "from $SLUICE_LOGICAL_DATE instead",
    "var": "Airflow Variables live in Airflow's database; pass the value as an env var "
    "(or a Secret through podTemplate)",
    "conn": "Airflow Connections live in Airflow's database; pass the value as an env var "
    "(or a Secret through podTemplate)",
    "prev_ds": "date arithmetic is not in Sluice's run context; compute it in the command",
    "next_ds": "date arithmetic is not in Sluice's run context; compute it in the command",
    "yesterday_ds": "date arithmetic is not in Sluice's run context; compute it in the command",
    "tomorrow_ds": "date arithmetic is not in Sluice's run context; compute it in the command",
    "prev_data_interval_start_success": "Sluice's run context has no previous run's interval",
    "prev_data_interval_end_success": "Sluice's run context has no previous run's interval",
    "prev_start_date_success": "Sluice's run context has no previous run's dates",
    "inlets": "Sluice has no lineage (inlets/outlets)",
    "outlets": "Sluice has no lineage (inlets/outlets)",
}
_STRFTIME = re.compile(r"%[A-Za-z%]|[^%]+")
_SAFE_LITERAL = re.compile(r"[A-Za-z0-9 _:.T/+-]*")
_DIRECTIVES = {
    "%Y": r"\1",
    "%m": r"\2",
    "%d": r"\3",
    "%H": r"\4",
    "%M": r"\5",
    "%S": r"\6",
    "%z": r"\7\8\9",
    "%%": "%",
}
_ISO = r"^(....)-(..)-(..)T(..):(..):(..)[.0-9]*(.)(..):(..)$"

_ENVIRONMENT = jinja2.Environment(keep_trailing_newline=True)


@dataclass(frozen=True)
class ContextValue:
    """A run-context variable, as is (`format` None) or as a strftime of its instant."""

    var: str
    format: str | None = None


Piece = str | ContextValue


@dataclass
class Template:
    pieces: list[Piece] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def is_plain(self) -> bool:
        return all(isinstance(piece, str) for piece in self.pieces)

    @property
    def uses(self) -> set[str]:
        return {piece.var for piece in self.pieces if isinstance(piece, ContextValue)}


def parse(text: str, params: TemplateParams | None) -> Template:
    """The template's literal text and context references; `params` what the task's
    `{{ params.x }}` can become (None: nothing is known statically)."""
    result = Template()
    if "{{" not in text and "{%" not in text and "{#" not in text:
        result.pieces.append(text)
        return result
    try:
        tree = _ENVIRONMENT.parse(text)
    except jinja2.TemplateSyntaxError as error:
        result.problems.append(f"invalid Jinja template (line {error.lineno}): {error.message}")
        return result
    for statement in tree.body:
        if not isinstance(statement, nodes.Output):
            result.problems.append(
                f"Jinja `{{% {type(statement).__name__.lower()} %}}` blocks decide at render "
                "time; write the logic in the shell command instead"
            )
            continue
        for node in statement.nodes:
            if isinstance(node, nodes.TemplateData):
                result.pieces.append(node.data)
            else:
                _expression(node, params, result)
    return result


def _expression(node: nodes.Node, params: TemplateParams | None, result: Template) -> None:
    filters: list[str] = []
    while isinstance(node, nodes.Filter):
        if node.args or node.kwargs:
            result.problems.append(f"the filter `{node.name}` with arguments is not supported")
            return
        filters.insert(0, node.name)
        assert node.node is not None
        node = node.node
    strftime: str | None = None
    if (
        isinstance(node, nodes.Call)
        and isinstance(node.node, nodes.Getattr)
        and node.node.attr in ("strftime", "isoformat")
    ):
        if node.node.attr == "strftime":
            if len(node.args) != 1 or not isinstance(node.args[0], nodes.Const):
                result.problems.append("strftime with a format that is not a constant")
                return
            strftime = str(node.args[0].value)
        node = node.node.node
    path = _path(node)
    if path is None:
        result.problems.append("a template expression other than a context name")
        return
    if path[0] == "params":
        _param(path, filters, params, result)
        return
    if path[0] in _REFUSED or (path[0] in ("ti", "task_instance") and "xcom_pull" in path):
        why = _REFUSED.get(
            path[0],
            "XCom: Sluice tasks pass no values to each other; "
            "write the value to storage both tasks read",
        )
        result.problems.append(f"`{{{{ {'.'.join(path)} }}}}`: {why}")
        return
    _context(path, filters, strftime, result)


def _path(node: nodes.Node) -> tuple[str, ...] | None:
    if isinstance(node, nodes.Name):
        return (node.name,)
    if isinstance(node, nodes.Getattr):
        head = _path(node.node)
        return None if head is None else (*head, node.attr)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        head = _path(node.node)
        return None if head is None else (*head, str(node.arg.value))
    if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr):
        head = _path(node.node)  # e.g. ti.xcom_pull(...): refused by name
        return head
    return None


def _context(
    path: tuple[str, ...], filters: list[str], strftime: str | None, result: Template
) -> None:
    shown = "{{ " + " | ".join([".".join(path), *filters]) + " }}"
    date_format: str | None = None
    if len(path) == 1 and path[0] in _DATE_FORMATS:
        var, date_format = LOGICAL, _DATE_FORMATS[path[0]]
    elif path in _NAMES:
        var = _NAMES[path]
    elif path[:2] == ("dag_run", "conf"):
        result.problems.append(
            f"`{shown}` reads one key of the run's conf; Sluice gives the whole conf as "
            "JSON in $SLUICE_CONF: read it in the command (e.g. with jq)"
        )
        return
    else:
        result.problems.append(f"`{shown}` is not in Sluice's run context")
        return
    if strftime is not None:
        if var not in DATES:
            result.problems.append(f"`{shown}`: strftime of a value that is not a date")
            return
        date_format = strftime
    for name in filters:
        if var == "SLUICE_CONF" and name == "tojson":
            continue
        if var in DATES and name in _DATE_FORMATS:
            date_format = _DATE_FORMATS[name]
            continue
        result.problems.append(f"`{shown}`: the filter `{name}` is not supported here")
        return
    if var == "SLUICE_CONF" and "tojson" not in filters:
        result.notes.append(
            f"`{shown}` renders a Python dict on Airflow; $SLUICE_CONF is the same conf as JSON"
        )
    if date_format is not None and _sed_replacement(date_format) is None:
        result.problems.append(
            f"`{shown}`: the date format {date_format!r} uses directives other than "
            "%Y %m %d %H %M %S %z"
        )
        return
    result.pieces.append(ContextValue(var, date_format))


def _param(
    path: tuple[str, ...], filters: list[str], params: TemplateParams | None, result: Template
) -> None:
    shown = "{{ " + " | ".join([".".join(path), *filters]) + " }}"
    if path == ("params",) and filters in ([], ["tojson"]):
        why = params.why_not_all if params is not None else "no params are known"
        if why is not None:
            result.problems.append(f"`{shown}`: $SLUICE_PARAMS is not these params: {why}")
            return
        result.pieces.append(ContextValue(run_params.ALL_PARAMS))
        if not filters:
            result.notes.append(
                f"`{shown}` renders a Python dict on Airflow; $SLUICE_PARAMS is the same "
                "params as JSON"
            )
        return
    if len(path) != 2 or filters:
        result.problems.append(f"`{shown}`: only a param's value as is can be converted")
        return
    name = path[1]
    if params is not None and name in params.variables:
        result.pieces.append(ContextValue(params.variables[name]))
        return
    values = params.values if params is not None else None
    if values is None or name not in values or isinstance(values[name], Unknown):
        result.problems.append(f"`{shown}`: the DAG's params have no static value for {name!r}")
        return
    value = values[name]
    result.pieces.append(str(value))  # what Airflow's Jinja renders
    why = params.why_static.get(name, "") if params is not None else ""
    result.notes.append(
        f"`{shown}` became its default {value!r}"
        + (f" ({why})" if why else "")
        + ": a run's conf cannot override it here"
    )


def _sed_replacement(date_format: str) -> str | None:
    parts = []
    for token in _STRFTIME.findall(date_format):
        if token.startswith("%"):
            if token not in _DIRECTIVES:
                return None
            parts.append(_DIRECTIVES[token])
        elif _SAFE_LITERAL.fullmatch(token):
            parts.append(token.replace("/", r"\/"))
        else:
            return None
    return "".join(parts)


def expansion(value: ContextValue) -> str:
    """A shell expansion of the value, valid unquoted or inside double quotes."""
    if value.format is None:
        return "${" + value.var + "}"
    if value.format == "%Y-%m-%d":
        return "${" + value.var + "%%T*}"
    replacement = _sed_replacement(value.format)
    return f"$(printf %s \"${value.var}\" | sed -E 's/{_ISO}/{replacement}/')"


def shell_script(template: Template) -> str:
    """The shell text with each context value expanded where Airflow's text stood.

    The quoting at each point is tracked so an expansion inside single quotes (where
    Airflow's rendered text would have stood literally) closes and reopens them.
    """
    state = _QuoteState()
    out: list[str] = []
    for piece in template.pieces:
        if isinstance(piece, str):
            state.feed(piece)
            out.append(piece)
            continue
        text = expansion(piece)
        if state.mode == "'":
            out.append(f"'\"{text}\"'")
        elif state.mode == '"':
            out.append(text)
        else:
            out.append(f'"{text}"')
    return "".join(out)


def shell_word(template: Template) -> str:
    """One shell word whose value is the rendered template (for `export NAME=WORD`)."""
    parts = []
    for piece in template.pieces:
        if isinstance(piece, str):
            if piece:
                parts.append("'" + piece.replace("'", "'\"'\"'") + "'")
        else:
            parts.append(f'"{expansion(piece)}"')
    return "".join(parts) or "''"


def kubernetes_text(template: Template) -> tuple[str | None, str | None]:
    """(the text with `$(VAR)` references, None) or (None, why it cannot be written so)."""
    out = []
    for piece in template.pieces:
        if isinstance(piece, str):
            out.append(piece.replace("$(", "$$("))  # Kubernetes would expand it otherwise
        elif piece.format is None:
            out.append(f"$({piece.var})")
        else:
            return None, (
                f"a date format of ${piece.var} ({piece.format}) in a container argument: "
                "Kubernetes' $(VAR) only names a whole variable; compute it in the program "
                "from $" + piece.var
            )
    return "".join(out), None


@dataclass
class _QuoteState:
    """Where POSIX shell text stands: outside quotes (''), in '...' or in "..."."""

    mode: str = ""
    escaped: bool = False

    def feed(self, text: str) -> None:
        for char in text:
            if self.escaped:
                self.escaped = False
            elif self.mode == "'":
                if char == "'":
                    self.mode = ""
            elif char == "\\":
                self.escaped = True
            elif self.mode == '"':
                if char == '"':
                    self.mode = ""
            elif char in "'\"":
                self.mode = char
