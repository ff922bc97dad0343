"""Reading a DAG file: its statements followed statically, to the DAGs, tasks and edges.

A small interpreter over the statements DAG files are made of: imports (bound
by name, never imported), module constants, `with DAG(...)`, `@dag`
functions (followed where they are called), `TaskGroup`s, operator calls,
`>>`/`<<`, `set_upstream`/`set_downstream`, `chain`, `cross_downstream`,
loops and comprehensions over values it can read, and helper functions
defined in the file (followed like a factory, with their arguments bound).
Operator calls are recorded with their arguments as values (`values`), for
`tasks` to map; nothing here decides what a field means on Sluice. A
statement it cannot follow where it could make or link tasks is a gap.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice.convert.findings import Finding
from sluice.convert.values import (
    BoundMethod,
    EvaluationError,
    Evaluator,
    ParamValue,
    Symbol,
    Unknown,
    bind,
)

MAX_CALL_DEPTH = 20
_DAG_CLASSES = ("DAG",)
_IGNORED_CALLS = frozenset({"print"})
_LOGGERS = frozenset({"logging", "log", "logger", "LOG"})


@dataclass(eq=False)
class DagDef:
    """A DAG the file defines: its arguments and the tasks and edges made in it."""

    dag_id: Any  # str, or Unknown
    line: int
    kwargs: dict[str, Any]
    lines: dict[str, int]
    airflow3: bool
    tasks: dict[str, TaskDef] = field(default_factory=dict)
    edges: list[tuple[TaskDef, TaskDef]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def default_args(self) -> Any:
        return self.kwargs.get("default_args", {})


@dataclass(eq=False)
class TaskDef:
    """One operator call: its class and arguments, as values."""

    task_id: str
    operator: str  # the class's qualified name, as imported
    kwargs: dict[str, Any]
    lines: dict[str, int]
    line: int
    dag: DagDef
    default_args: dict[str, Any]
    refused: str | None = None  # why it cannot be converted at all (TaskFlow, mapping)

    @property
    def operator_name(self) -> str:
        return self.operator.rsplit(".", 1)[-1]


@dataclass(eq=False)
class GroupDef:
    group_id: str
    prefix: str
    dag: DagDef
    default_args: dict[str, Any]
    tasks: list[TaskDef] = field(default_factory=list)


@dataclass(frozen=True)
class Function:
    node: ast.FunctionDef
    kind: str  # "helper", "dag", "task", "task_group"
    decorator: dict[str, Any]  # the decorator's arguments
    decorator_name: str = ""


@dataclass(frozen=True)
class Partial:
    """`SomeOperator.partial(...)`: dynamic task mapping once `.expand` is called."""

    operator: str
    kwargs: dict[str, Any]


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class FileReader(Evaluator):
    """Follows one file's statements; `dags` and `findings` hold what it found."""

    def __init__(self, path: str, tree: ast.Module) -> None:
        self.path = path
        self.module: dict[str, Any] = {}
        super().__init__([self.module])
        self.dags: list[DagDef] = []
        self.findings: list[Finding] = []
        self._dag_stack: list[DagDef] = []
        self._group_stack: list[GroupDef] = []
        self._depth = 0
        self.airflow3 = False
        self._bind_imports(tree)
        self.tree = tree

    def read(self) -> None:
        self.block(self.tree.body)

    # -- findings -----------------------------------------------------------------------

    def gap(self, line: int, message: str, task: str | None = None) -> None:
        dag = self._dag_stack[-1] if self._dag_stack else None
        finding = Finding("gap", self.path, line, message, _dag_name(dag), task)
        (dag.findings if dag else self.findings).append(finding)

    # -- imports ------------------------------------------------------------------------

    def _bind_imports(self, tree: ast.Module) -> None:
        """Every import in the file, wherever it stands (version switches, try/except)."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.module[alias.asname] = Symbol(alias.name)
                    else:
                        head = alias.name.split(".", 1)[0]
                        self.module[head] = Symbol(head)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.startswith("airflow.sdk") or node.module.startswith(
                    "airflow.providers.standard"
                ):
                    self.airflow3 = True
                for alias in node.names:
                    name = alias.asname or alias.name
                    if name not in self.module:  # the first branch of a version switch wins
                        self.module[name] = Symbol(f"{node.module}.{alias.name}")

    # -- statements ---------------------------------------------------------------------

    def block(self, statements: Iterable[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        match node:
            case ast.Import() | ast.ImportFrom() | ast.Pass() | ast.Global() | ast.Nonlocal():
                return
            case ast.Expr(value=ast.Constant()):
                return  # a docstring
            case ast.Expr(value=value):
                if _ignorable_call(value):
                    return
                result = self.value(value)
                if isinstance(result, Unknown):
                    self.gap(result.line, f"statement not converted: {result.why}")
            case ast.Assign(targets=targets, value=value):
                result = self.value(value)
                for target in targets:
                    self._assign(target, result)
            case ast.AnnAssign(target=target, value=value) if value is not None:
                self._assign(target, self.value(value))
            case ast.AugAssign(target=target, op=op, value=value):
                result = self.value(
                    ast.BinOp(
                        left=_load(target), op=op, right=value, lineno=node.lineno, col_offset=0
                    )
                )
                self._assign(target, result)
            case ast.If(test=test, body=body, orelse=orelse):
                self._if(node, test, body, orelse)
            case ast.For(target=target, iter=iterable, body=body):
                self._for(node, target, iterable, body)
            case ast.With(items=items, body=body):
                self._with(node, items, body)
            case ast.FunctionDef():
                self.scopes[0][node.name] = self._function(node)
            case ast.Return(value=value):
                raise _Return(self.value(value) if value is not None else None)
            case ast.Break():
                raise _Break
            case ast.Continue():
                raise _Continue
            case ast.Try(body=body):
                if all(isinstance(s, ast.Import | ast.ImportFrom | ast.Pass) for s in body):
                    return
                self.block(body)
            case ast.ClassDef(name=name):
                self.scopes[0][name] = Unknown(
                    node.lineno, f"class {name} is defined in this file (user code)"
                )
            case _:
                self.gap(
                    node.lineno,
                    f"a `{type(node).__name__}` statement is not converted; the converter reads "
                    "assignments, loops, ifs, with-blocks, functions and expressions",
                )

    def _assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Subscript):
            container = self.value(target.value)
            key = self.value(target.slice)
            if isinstance(container, dict | list) and not isinstance(key, Unknown):
                container[key] = value
                return
            self.gap(target.lineno, "an item assignment into a value not read statically")
            return
        if isinstance(target, ast.Attribute):
            owner = self.value(target.value)
            if isinstance(owner, TaskDef):
                owner.kwargs[target.attr] = value
                owner.lines[target.attr] = target.lineno
                return
            if isinstance(owner, DagDef):
                owner.kwargs[target.attr] = value
                owner.lines[target.attr] = target.lineno
                return
            self.gap(target.lineno, "an attribute assignment the converter does not follow")
            return
        try:
            bind(self.scopes[0], target, value)
        except EvaluationError as error:
            self.gap(error.line, error.why)

    def _if(
        self, node: ast.If, test: ast.expr, body: list[ast.stmt], orelse: list[ast.stmt]
    ) -> None:
        decided = self.value(test)
        if isinstance(decided, Unknown):
            if all(_only_imports(branch) for branch in (body, orelse)):
                return  # an import switch (Airflow 2 or 3): the imports are bound already
            self.gap(node.lineno, f"cannot decide this `if` statically: {decided.why}")
            return
        self.block(body if decided else orelse)

    def _for(
        self, node: ast.For, target: ast.expr, iterable: ast.expr, body: list[ast.stmt]
    ) -> None:
        items = self.value(iterable)
        if isinstance(items, Unknown):
            self.gap(node.lineno, f"cannot follow this loop: {items.why}")
            return
        try:
            sequence = self._iterate(items, node.lineno)
        except EvaluationError as error:
            self.gap(error.line, error.why)
            return
        for item in sequence:
            self._assign(target, item)
            try:
                self.block(body)
            except _Break:
                break
            except _Continue:
                continue

    def _with(self, node: ast.With, items: list[ast.withitem], body: list[ast.stmt]) -> None:
        entered: list[DagDef | GroupDef] = []
        for item in items:
            context = self.value(item.context_expr)
            if isinstance(context, DagDef):
                self._dag_stack.append(context)
                entered.append(context)
            elif isinstance(context, GroupDef):
                self._group_stack.append(context)
                entered.append(context)
            elif isinstance(context, Unknown):
                self.gap(context.line, f"cannot follow this `with`: {context.why}")
            if item.optional_vars is not None:
                self._assign(item.optional_vars, context)
        try:
            self.block(body)
        finally:
            for context in reversed(entered):
                (self._dag_stack if isinstance(context, DagDef) else self._group_stack).pop()

    def _function(self, node: ast.FunctionDef) -> Function | Unknown:
        if not node.decorator_list:
            return Function(node, "helper", {})
        if len(node.decorator_list) > 1:
            return Unknown(node.lineno, f"function {node.name} has several decorators")
        decorator = node.decorator_list[0]
        call_args: dict[str, Any] = {}
        target = decorator
        if isinstance(decorator, ast.Call):
            target = decorator.func
            call_args = {k.arg: self.value(k.value) for k in decorator.keywords if k.arg}
        symbol = self.value(target)
        if not isinstance(symbol, Symbol) or not symbol.qualname.startswith("airflow"):
            return Unknown(node.lineno, f"function {node.name} has a decorator from user code")
        parts = symbol.qualname.split(".")
        for kind in ("task_group", "dag", "task"):
            if kind in parts:
                return Function(node, kind, call_args, symbol.qualname)
        return Unknown(node.lineno, f"@{symbol.qualname} is not converted")

    # -- expressions --------------------------------------------------------------------

    def _BinOp(self, node: ast.BinOp) -> Any:
        if not isinstance(node.op, ast.RShift | ast.LShift):
            return super()._BinOp(node)
        left, right = self.eval(node.left), self.eval(node.right)
        upstream, downstream = (left, right) if isinstance(node.op, ast.RShift) else (right, left)
        self._link(upstream, downstream, node.lineno)
        return right

    def attribute(self, target: Any, name: str, line: int) -> Any:
        if isinstance(target, TaskDef | GroupDef) and name in (
            "set_downstream",
            "set_upstream",
            "expand",
            "expand_kwargs",
        ):
            return BoundMethod(target, name)
        if isinstance(target, TaskDef) and name == "task_id":
            return target.task_id
        if isinstance(target, DagDef) and name == "dag_id":
            return target.dag_id
        if isinstance(target, Function) and name in ("override", "expand", "partial"):
            return BoundMethod(target, name)
        if isinstance(target, Symbol) and name in ("partial",) and _is_operator(target):
            return BoundMethod(target, name)
        if isinstance(target, Partial) and name in ("expand", "expand_kwargs"):
            return BoundMethod(target, name)
        if isinstance(target, list) and name in ("append", "extend"):
            return BoundMethod(target, name)
        return super().attribute(target, name, line)

    def call(self, function: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call) -> Any:
        line = node.lineno
        lines = {k.arg: k.value.lineno for k in node.keywords if k.arg}
        if isinstance(function, Symbol) and function.qualname.startswith("airflow"):
            # A DAG's or an operator's argument may be unreadable alone: it is a gap of
            # that field, not of the whole DAG or task.
            return self._airflow(function, args, kwargs, lines, line)
        unknown = next((a for a in [*args, *kwargs.values()] if isinstance(a, Unknown)), None)
        if unknown is not None:
            raise EvaluationError(unknown.line, unknown.why)
        if isinstance(function, BoundMethod):
            return self._bound(function, args, kwargs, node)
        if isinstance(function, Function):
            return self._call_function(function, args, kwargs, node)
        if isinstance(function, Symbol) and function.qualname.startswith("kubernetes.client"):
            return _kubernetes_model(function, kwargs, line)
        return super().call(function, args, kwargs, node)

    def _bound(
        self, method: BoundMethod, args: list[Any], kwargs: dict[str, Any], node: ast.Call
    ) -> Any:
        target, name, line = method.target, method.name, node.lineno
        if isinstance(target, list) and name in ("append", "extend"):
            target.append(args[0]) if name == "append" else target.extend(args[0])
            return None
        if name in ("set_downstream", "set_upstream"):
            other = args[0] if args else kwargs.get("task_or_task_list")
            if name == "set_downstream":
                self._link(target, other, line)
            else:
                self._link(other, target, line)
            return None
        if name == "partial" and isinstance(target, Symbol):
            return Partial(target.qualname, kwargs)
        if name == "override" and isinstance(target, Function):
            return Function(
                target.node, target.kind, {**target.decorator, **kwargs}, target.decorator_name
            )
        if name in ("expand", "expand_kwargs", "partial"):
            mapped = self._mapped(target, line)
            self._link_inputs(mapped, [*args, *kwargs.values()], line)
            return mapped
        return super().call(method, args, kwargs, node)

    def _mapped(self, target: Any, line: int) -> Any:
        why = (
            "dynamic task mapping (.partial/.expand) makes its tasks at run time; Sluice's "
            "tasks are fixed in the manifest: write one task per item, or loop in one task"
        )
        if isinstance(target, TaskDef):
            target.refused = why
            return target
        if isinstance(target, Function):
            return self._new_task(
                str(target.decorator.get("task_id") or target.node.name),
                "airflow.decorators.task",
                {},
                {},
                line,
                refused=why,
            )
        operator = target.operator if isinstance(target, Partial) else "mapped"
        kwargs = target.kwargs if isinstance(target, Partial) else {}
        task_id = kwargs.get("task_id")
        if not isinstance(task_id, str):
            raise EvaluationError(line, "a mapped task without a task_id read statically")
        return self._new_task(task_id, operator, kwargs, {}, line, refused=why)

    def _call_function(
        self, function: Function, args: list[Any], kwargs: dict[str, Any], node: ast.Call
    ) -> Any:
        line = node.lineno
        if function.kind == "task":
            task_id = function.decorator.get("task_id") or function.node.name
            kind = function.decorator_name.rsplit(".", 1)[-1]
            flavour = "" if kind == "task" else f".{kind}"
            task = self._new_task(
                _unique(str(task_id), self._current_dag(line)),
                function.decorator_name,
                {},
                {},
                line,
                refused=f"@task{flavour} runs a Python function ({function.node.name}); Sluice "
                "runs containers: put the code in an image and run it with a command",
            )
            self._link_inputs(task, [*args, *kwargs.values()], line)
            return task
        if self._depth >= MAX_CALL_DEPTH:
            raise EvaluationError(line, "functions call each other too deep to follow")
        scope = self._parameters(function.node, args, kwargs, line)
        if function.kind == "dag":
            dag_kwargs = {**function.decorator}
            dag_kwargs.setdefault("dag_id", function.node.name)
            dag = self._new_dag(dag_kwargs, {}, function.node.lineno)
            self._dag_stack.append(dag)
        group = None
        if function.kind == "task_group":
            group_id = str(function.decorator.get("group_id") or function.node.name)
            group = self._new_group(group_id, function.decorator, line)
            self._group_stack.append(group)
        self.scopes.insert(0, scope)
        self._depth += 1
        result: Any = None
        try:
            self.block(function.node.body)
        except _Return as returned:
            result = returned.value
        finally:
            self._depth -= 1
            self.scopes.pop(0)
            if function.kind == "dag":
                self._dag_stack.pop()
            if group is not None:
                self._group_stack.pop()
        if function.kind == "dag":
            return dag
        return group if group is not None else result

    def _parameters(
        self, node: ast.FunctionDef, args: list[Any], kwargs: dict[str, Any], line: int
    ) -> dict[str, Any]:
        scope: dict[str, Any] = {}
        positional = [*node.args.posonlyargs, *node.args.args]
        defaults = node.args.defaults
        for index, parameter in enumerate(positional):
            default_index = index - (len(positional) - len(defaults))
            if index < len(args):
                scope[parameter.arg] = args[index]
            elif parameter.arg in kwargs:
                scope[parameter.arg] = kwargs[parameter.arg]
            elif default_index >= 0:
                scope[parameter.arg] = self.value(defaults[default_index])
            else:
                scope[parameter.arg] = Unknown(line, f"argument {parameter.arg!r} not given")
        for parameter, default in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True):
            if parameter.arg in kwargs:
                scope[parameter.arg] = kwargs[parameter.arg]
            elif default is not None:
                scope[parameter.arg] = self.value(default)
        return scope

    def _airflow(
        self,
        symbol: Symbol,
        args: list[Any],
        kwargs: dict[str, Any],
        lines: dict[str, int],
        line: int,
    ) -> Any:
        last = symbol.last
        if last in _DAG_CLASSES:
            if args:
                kwargs = {"dag_id": args[0], **kwargs}
            return self._new_dag(kwargs, lines, line)
        if last == "TaskGroup":
            group_id = args[0] if args else kwargs.get("group_id")
            if not isinstance(group_id, str):
                raise EvaluationError(line, "a TaskGroup without a group_id read statically")
            return self._new_group(group_id, kwargs, line)
        if last in ("chain", "chain_linear"):
            self._chain(args, line, linear=last == "chain_linear")
            return None
        if last == "cross_downstream":
            for upstream in _flatten(args[0] if args else kwargs.get("from_tasks")):
                self._link(upstream, args[1] if len(args) > 1 else kwargs.get("to_tasks"), line)
            return None
        if last == "Param":
            if not args and "default" not in kwargs:
                raise EvaluationError(line, "a Param without a default value")
            given = ["description"] if len(args) > 1 else []
            given += [key for key in kwargs if key != "default"]
            return ParamValue(args[0] if args else kwargs["default"], tuple(given))
        if last == "Label":
            raise EvaluationError(line, "edge labels (Label) are not converted")
        if last == "CronDataIntervalTimetable":
            cron = args[0] if args else kwargs.get("cron")
            return {
                "timetable": "cron",
                "cron": cron,
                "timezone": kwargs.get("timezone", args[1] if len(args) > 1 else None),
            }
        if last.endswith("Timetable") or last in ("Dataset", "Asset", "DatasetAlias", "AssetAlias"):
            raise EvaluationError(
                line,
                f"{last}: Sluice schedules are cron expressions or presets (runs over data "
                "intervals); data-aware and custom timetables have no equivalent",
            )
        if last == "Variable" or symbol.qualname.endswith("Variable.get"):
            raise EvaluationError(
                line,
                "Airflow Variables are read at parse time from Airflow's database; "
                "write the value into the DAG file or pass it as an env var",
            )
        if _is_operator(symbol):
            task_id = kwargs.get("task_id")
            if not isinstance(task_id, str):
                raise EvaluationError(line, f"{last} without a task_id read statically")
            return self._new_task(task_id, symbol.qualname, kwargs, lines, line)
        unknown = next((a for a in [*args, *kwargs.values()] if isinstance(a, Unknown)), None)
        if unknown is not None:
            raise EvaluationError(unknown.line, unknown.why)
        return super().library(symbol, args, kwargs, line)

    # -- DAGs, groups, tasks and edges --------------------------------------------------

    def _new_dag(self, kwargs: dict[str, Any], lines: dict[str, int], line: int) -> DagDef:
        dag = DagDef(
            kwargs.get("dag_id", Unknown(line, "no dag_id")), line, kwargs, lines, self.airflow3
        )
        self.dags.append(dag)
        return dag

    def _new_group(self, group_id: str, kwargs: Mapping[str, Any], line: int) -> GroupDef:
        dag = kwargs.get("dag") if isinstance(kwargs.get("dag"), DagDef) else None
        dag = dag or self._current_dag(line)
        parent = self._group_stack[-1] if self._group_stack else None
        prefix = parent.prefix if parent else ""
        if kwargs.get("prefix_group_id", True):
            prefix = f"{prefix}{group_id}."
        defaults = {**(parent.default_args if parent else {})}
        group_defaults = kwargs.get("default_args") or {}
        if isinstance(group_defaults, Mapping):
            defaults.update(group_defaults)
        return GroupDef(group_id, prefix, dag, defaults)

    def _current_dag(self, line: int) -> DagDef:
        if self._group_stack:
            return self._group_stack[-1].dag
        if self._dag_stack:
            return self._dag_stack[-1]
        raise EvaluationError(line, "a task made outside any DAG (no `with DAG` or dag=)")

    def _new_task(
        self,
        task_id: str,
        operator: str,
        kwargs: dict[str, Any],
        lines: dict[str, int],
        line: int,
        refused: str | None = None,
    ) -> TaskDef:
        explicit = kwargs.get("dag")
        dag = explicit if isinstance(explicit, DagDef) else self._current_dag(line)
        group = self._group_stack[-1] if self._group_stack else None
        if group is not None and "task_group" not in kwargs:
            task_id = group.prefix + task_id
        dag_defaults = dag.default_args if isinstance(dag.default_args, Mapping) else {}
        defaults = {**dag_defaults, **(group.default_args if group else {})}
        if task_id in dag.tasks:
            raise EvaluationError(
                line, f"task_id {task_id!r} is used twice in this DAG (Airflow refuses it too)"
            )
        task = TaskDef(task_id, operator, kwargs, lines, line, dag, defaults, refused)
        dag.tasks[task_id] = task
        if group is not None:
            group.tasks.append(task)
        return task

    def _link_inputs(self, task: TaskDef, inputs: list[Any], line: int) -> None:
        """A TaskFlow call's arguments that are other tasks' results: Airflow makes them
        upstream of the call's task."""
        for value in inputs:
            found = _flatten(list(value.values()) if isinstance(value, Mapping) else value)
            for upstream in found:
                if isinstance(upstream, TaskDef):
                    self._link(upstream, task, line)

    def _chain(self, items: list[Any], line: int, linear: bool) -> None:
        for upstream, downstream in itertools.pairwise(items):
            if (
                not linear
                and isinstance(upstream, list | tuple)
                and isinstance(downstream, list | tuple)
            ):
                if len(upstream) != len(downstream):
                    raise EvaluationError(
                        line, "chain() of two lists of different lengths (Airflow refuses it)"
                    )
                for up, down in zip(upstream, downstream, strict=True):
                    self._link(up, down, line)
            elif linear:  # chain_linear: every task of one element before every task of the next
                for up in _flatten(upstream):
                    self._link(up, downstream, line)
            else:
                self._link(upstream, downstream, line)

    def _link(self, upstream: Any, downstream: Any, line: int) -> None:
        if isinstance(upstream, list | tuple) and isinstance(downstream, list | tuple):
            raise EvaluationError(
                line, "a list >> a list (Airflow refuses it: use cross_downstream or chain)"
            )
        ups = [task for item in _flatten(upstream) for task in self._ends(item, "leaves", line)]
        downs = [task for item in _flatten(downstream) for task in self._ends(item, "roots", line)]
        for up in ups:
            for down in downs:
                if up.dag is not down.dag:
                    raise EvaluationError(line, "a dependency between tasks of two DAGs")
                if (up, down) not in up.dag.edges:
                    up.dag.edges.append((up, down))

    def _ends(self, item: Any, which: str, line: int) -> list[TaskDef]:
        if isinstance(item, TaskDef):
            return [item]
        if isinstance(item, GroupDef):
            inside = set(item.tasks)
            edges = [(u, d) for u, d in item.dag.edges if u in inside and d in inside]
            if which == "roots":
                return [t for t in item.tasks if not any(d is t for _, d in edges)]
            return [t for t in item.tasks if not any(u is t for u, _ in edges)]
        if isinstance(item, Unknown):
            raise EvaluationError(item.line, item.why)
        raise EvaluationError(line, "a dependency on something that is not a task")


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return [item for element in value for item in _flatten(element)]
    return [value]


def _unique(task_id: str, dag: DagDef) -> str:
    """Airflow's own rule for a TaskFlow task called twice: `name__1`, `name__2`, ..."""
    if task_id not in dag.tasks:
        return task_id
    number = 1
    while f"{task_id}__{number}" in dag.tasks:
        number += 1
    return f"{task_id}__{number}"


def _is_operator(symbol: Symbol) -> bool:
    return symbol.qualname.startswith("airflow") and (
        symbol.last.endswith(("Operator", "Sensor")) or symbol.last in ("KubernetesPodOperator",)
    )


def _kubernetes_model(symbol: Symbol, kwargs: dict[str, Any], line: int) -> Any:
    if symbol.last == "V1EnvVar":
        if "value_from" in kwargs:
            raise EvaluationError(
                line, "an env var from a Secret or field (value_from): put it in podTemplate"
            )
        return {"name": kwargs.get("name"), "value": kwargs.get("value", "")}
    if symbol.last == "V1ResourceRequirements":
        return {key: kwargs[key] for key in ("requests", "limits") if kwargs.get(key)}
    raise EvaluationError(line, f"{symbol.last}: put it in the task's podTemplate instead")


def _dag_name(dag: DagDef | None) -> str | None:
    if dag is None:
        return None
    return dag.dag_id if isinstance(dag.dag_id, str) else None


def _only_imports(statements: list[ast.stmt]) -> bool:
    return all(isinstance(s, ast.Import | ast.ImportFrom | ast.Pass) for s in statements)


def _ignorable_call(node: ast.expr) -> bool:
    """`print(...)` and `logging.info(...)`-style calls: output, not DAG structure."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in _IGNORED_CALLS
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and (func.value.id in _LOGGERS)
    )


def _load(target: ast.expr) -> ast.expr:
    """The target of `x += y` read as a value."""
    copied = ast.parse(ast.unparse(target), mode="eval").body
    return ast.copy_location(copied, target)
