"""Values read from a DAG file's syntax tree without running it.

The converter never imports or executes the file: an expression is evaluated
here over a small, closed set of things whose meaning is fixed (literals,
containers, f-strings, module constants, `datetime`/`pendulum`/`timedelta`
constructors, a few pure builtins and string methods). Anything else (a
call into user code, `Variable.get`, `os.environ`, `days_ago`) evaluates to
`Unknown`, which carries the line and the reason; it becomes a gap only where
a DAG or task field needs it, so an unused helper constant costs nothing.
Sizes are bounded (`MAX_ITEMS`) so a hostile file cannot make the converter
build a huge string or range.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MAX_ITEMS = 10_000


@dataclass(frozen=True)
class Unknown:
    """A value the file computes in a way the converter does not follow."""

    line: int
    why: str


@dataclass(frozen=True)
class Symbol:
    """An imported name (or an attribute of one): `airflow.operators.bash.BashOperator`."""

    qualname: str

    @property
    def last(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    def attr(self, name: str) -> Symbol:
        return Symbol(f"{self.qualname}.{name}")


@dataclass(frozen=True)
class ParamValue:
    """An Airflow `Param(default, ...)`: its default, and the other arguments it was given
    (a description, JSON Schema keywords such as `type` or `enum`)."""

    default: Any
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class Builtin:
    name: str


@dataclass(frozen=True)
class BoundMethod:
    target: Any
    name: str


class EvaluationError(Exception):
    """Raised inside the evaluator; turned into an `Unknown` at the expression's boundary."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(why)
        self.line = line
        self.why = why


BUILTINS = frozenset(
    {
        "range",
        "len",
        "str",
        "int",
        "float",
        "bool",
        "list",
        "tuple",
        "dict",
        "enumerate",
        "zip",
        "sorted",
        "reversed",
        "min",
        "max",
        "True",
        "False",
        "None",
    }
)

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.BitOr: operator.or_,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
_STR_METHODS = frozenset(
    {
        "format",
        "upper",
        "lower",
        "replace",
        "strip",
        "lstrip",
        "rstrip",
        "join",
        "split",
        "startswith",
        "endswith",
        "title",
        "removeprefix",
        "removesuffix",
    }
)
_DICT_METHODS = frozenset({"items", "keys", "values", "get", "copy"})


def zone(name: str, line: int) -> ZoneInfo:
    if name.upper() == "UTC":
        return ZoneInfo("UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise EvaluationError(
            line, f"unknown time zone {name!r}; use an IANA name like 'Europe/Paris'"
        ) from None


def zone_name(tz: tzinfo | None) -> str | None:
    """The IANA name of a datetime's zone, or None when it has none Sluice can use."""
    if tz is None:
        return None
    if isinstance(tz, ZoneInfo):
        return tz.key
    if tz == UTC:
        return "UTC"
    return None


class Evaluator:
    """Evaluates expressions over `scopes` (innermost first); `call` may be extended."""

    def __init__(self, scopes: list[dict[str, Any]]) -> None:
        self.scopes = scopes

    # -- entry points -------------------------------------------------------------------

    def value(self, node: ast.expr) -> Any:
        """The expression's value, or `Unknown` saying why it has none here."""
        try:
            return self.eval(node)
        except EvaluationError as error:
            return Unknown(error.line, error.why)
        except (
            TypeError,
            ValueError,
            KeyError,
            IndexError,
            ZeroDivisionError,
            AttributeError,
            OverflowError,
        ) as error:
            return Unknown(node.lineno, f"cannot evaluate this expression: {error}")

    def eval(self, node: ast.expr) -> Any:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise EvaluationError(
                node.lineno, f"{type(node).__name__} expressions are not read statically"
            )
        result = method(node)
        if isinstance(result, Unknown):
            raise EvaluationError(result.line, result.why)
        return result

    def lookup(self, name: str, line: int) -> Any:
        for scope in self.scopes:
            if name in scope:
                found = scope[name]
                if isinstance(found, Unknown):
                    raise EvaluationError(found.line, found.why)
                return found
        if name in BUILTINS:
            return {"True": True, "False": False, "None": None}.get(name, Builtin(name))
        raise EvaluationError(line, f"name {name!r} is not defined in this file")

    # -- expressions ------------------------------------------------------------------

    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _Name(self, node: ast.Name) -> Any:
        return self.lookup(node.id, node.lineno)

    def _List(self, node: ast.List) -> list[Any]:
        return self._items(node.elts)

    def _Tuple(self, node: ast.Tuple) -> tuple[Any, ...]:
        return tuple(self._items(node.elts))

    def _Set(self, node: ast.Set) -> list[Any]:
        return self._items(node.elts)

    def _items(self, elements: list[ast.expr]) -> list[Any]:
        items: list[Any] = []
        for element in elements:
            if isinstance(element, ast.Starred):
                items.extend(self._iterate(self.eval(element.value), element.lineno))
            else:
                items.append(self.eval(element))
        return items

    def _Dict(self, node: ast.Dict) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                merged = self.eval(value)
                if not isinstance(merged, Mapping):
                    raise EvaluationError(value.lineno, "`**` of something that is not a dict")
                result.update(merged)
            else:
                result[self.eval(key)] = self.eval(value)
        return result

    def _JoinedStr(self, node: ast.JoinedStr) -> str:
        parts = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                parts.append(str(part.value))
            elif isinstance(part, ast.FormattedValue):
                value = self.eval(part.value)
                spec = self.eval(part.format_spec) if part.format_spec else ""
                if part.conversion == ord("r"):
                    value = repr(value)
                parts.append(format(self._plain(value, part.lineno), spec))
        return "".join(parts)

    def _BinOp(self, node: ast.BinOp) -> Any:
        left, right = self.eval(node.left), self.eval(node.right)
        function = _BINARY.get(type(node.op))
        if function is None:
            raise EvaluationError(node.lineno, f"operator {type(node.op).__name__} not read")
        if isinstance(node.op, ast.Mult):
            self._bounded_repeat(left, right, node.lineno)
        return function(self._plain(left, node.lineno), self._plain(right, node.lineno))

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self._plain(self.eval(node.operand), node.lineno)
        match node.op:
            case ast.USub():
                return -value
            case ast.UAdd():
                return +value
            case ast.Not():
                return not value
        raise EvaluationError(node.lineno, "operator ~ is not read statically")

    def _BoolOp(self, node: ast.BoolOp) -> Any:
        result: Any = None
        for operand in node.values:
            result = self.eval(operand)
            if isinstance(node.op, ast.And) and not result:
                return result
            if isinstance(node.op, ast.Or) and result:
                return result
        return result

    def _Compare(self, node: ast.Compare) -> bool:
        left = self._plain(self.eval(node.left), node.lineno)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = self._plain(self.eval(comparator), node.lineno)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def _IfExp(self, node: ast.IfExp) -> Any:
        test = self._plain(self.eval(node.test), node.lineno)
        return self.eval(node.body if test else node.orelse)

    def _Subscript(self, node: ast.Subscript) -> Any:
        target = self.eval(node.value)
        index = (
            slice(
                *(
                    self.eval(x) if x else None
                    for x in (node.slice.lower, node.slice.upper, node.slice.step)
                )
            )
            if isinstance(node.slice, ast.Slice)
            else self.eval(node.slice)
        )
        if isinstance(target, Mapping | list | tuple | str):
            try:
                return target[index]
            except (KeyError, IndexError, TypeError):
                raise EvaluationError(node.lineno, f"no item {index!r} here") from None
        raise EvaluationError(node.lineno, "subscript of a value not read statically")

    def _Attribute(self, node: ast.Attribute) -> Any:
        target = self.eval(node.value)
        return self.attribute(target, node.attr, node.lineno)

    def attribute(self, target: Any, name: str, line: int) -> Any:
        if isinstance(target, Symbol):
            if target.qualname in ("datetime.timezone", "pendulum") and name in ("utc", "UTC"):
                return ZoneInfo("UTC")
            return target.attr(name)
        if isinstance(target, str) and name in _STR_METHODS:
            return BoundMethod(target, name)
        if isinstance(target, Mapping) and name in _DICT_METHODS:
            return BoundMethod(target, name)
        if isinstance(target, datetime) and name in ("in_timezone", "in_tz", "replace"):
            return BoundMethod(target, name)
        if isinstance(target, list) and name == "copy":
            return BoundMethod(target, name)
        raise EvaluationError(line, f"attribute {name!r} of this value is not read statically")

    def _ListComp(self, node: ast.ListComp) -> list[Any]:
        return [self.eval(node.elt) for _ in self._comprehension(node.generators, node.lineno)]

    def _GeneratorExp(self, node: ast.GeneratorExp) -> list[Any]:
        return [self.eval(node.elt) for _ in self._comprehension(node.generators, node.lineno)]

    def _SetComp(self, node: ast.SetComp) -> list[Any]:
        return [self.eval(node.elt) for _ in self._comprehension(node.generators, node.lineno)]

    def _DictComp(self, node: ast.DictComp) -> dict[Any, Any]:
        return {
            self.eval(node.key): self.eval(node.value)
            for _ in self._comprehension(node.generators, node.lineno)
        }

    def _comprehension(self, generators: list[ast.comprehension], line: int) -> Iterable[None]:
        """Binds each combination of the generators' targets in a new scope, in turn."""
        scope: dict[str, Any] = {}
        self.scopes.insert(0, scope)
        try:
            yield from self._generate(generators, scope, line)
        finally:
            self.scopes.remove(scope)

    def _generate(
        self, generators: list[ast.comprehension], scope: dict[str, Any], line: int
    ) -> Iterable[None]:
        if not generators:
            yield None
            return
        first, rest = generators[0], generators[1:]
        if first.is_async:
            raise EvaluationError(line, "async comprehensions are not read statically")
        for item in self._iterate(self.eval(first.iter), first.iter.lineno):
            bind(scope, first.target, item)
            if all(self._plain(self.eval(test), line) for test in first.ifs):
                yield from self._generate(rest, scope, line)

    def _Call(self, node: ast.Call) -> Any:
        function = self.eval(node.func)
        args: list[Any] = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                args.extend(self._iterate(self.eval(arg.value), arg.lineno))
            else:
                args.append(self.value(arg))  # an Unknown argument: the callee decides
        kwargs: dict[str, Any] = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                spread = self.eval(keyword.value)
                if not isinstance(spread, Mapping):
                    raise EvaluationError(keyword.lineno, "`**` of something that is not a dict")
                kwargs.update(spread)
            else:
                kwargs[keyword.arg] = self.value(keyword.value)
        return self.call(function, args, kwargs, node)

    # -- calls ------------------------------------------------------------------------

    def call(self, function: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call) -> Any:
        line = node.lineno
        unknown = next((a for a in [*args, *kwargs.values()] if isinstance(a, Unknown)), None)
        if unknown is not None:
            raise EvaluationError(unknown.line, unknown.why)
        if isinstance(function, Builtin):
            return self._builtin(function.name, args, kwargs, line)
        if isinstance(function, BoundMethod):
            return self._method(function, args, kwargs, line)
        if isinstance(function, Symbol):
            return self.library(function, args, kwargs, line)
        raise EvaluationError(line, "a call the converter cannot follow")

    def _builtin(self, name: str, args: list[Any], kwargs: dict[str, Any], line: int) -> Any:
        plain = [self._plain(arg, line) for arg in args]
        if name == "range":
            result = range(*plain)
            if len(result) > MAX_ITEMS:
                raise EvaluationError(line, f"range of more than {MAX_ITEMS} items")
            return list(result)
        if name in ("enumerate", "zip", "sorted", "reversed", "list", "tuple"):
            iterables = [self._iterate(arg, line) for arg in args]
            function: Any = {
                "enumerate": enumerate,
                "zip": zip,
                "sorted": sorted,
                "reversed": reversed,
                "list": list,
                "tuple": tuple,
            }[name]
            return list(function(*iterables, **kwargs)) if name != "tuple" else tuple(*iterables)
        if name == "dict":
            return dict(*plain, **kwargs)
        simple: dict[str, Callable[..., Any]] = {
            "len": len,
            "str": str,
            "int": int,
            "float": float,
            "bool": bool,
            "min": min,
            "max": max,
        }
        return simple[name](*plain)

    def _method(
        self, method: BoundMethod, args: list[Any], kwargs: dict[str, Any], line: int
    ) -> Any:
        target = method.target
        if isinstance(target, datetime):
            return self._datetime_method(target, method.name, args, kwargs, line)
        plain_args = [self._plain(arg, line) for arg in args]
        if method.name == "join":
            plain_args = [[self._plain(item, line) for item in self._iterate(args[0], line)]]
        if method.name == "format":
            plain_args = [self._plain(arg, line) for arg in args]
            kwargs = {key: self._plain(value, line) for key, value in kwargs.items()}
        result = getattr(target, method.name)(*plain_args, **kwargs)
        if method.name in ("items", "keys", "values"):
            return [list(item) if isinstance(item, tuple) else item for item in result]
        return result

    def _datetime_method(
        self, target: datetime, name: str, args: list[Any], kwargs: dict[str, Any], line: int
    ) -> datetime:
        if name in ("in_timezone", "in_tz"):
            tz = args[0] if args else kwargs.get("tz")
            return target.astimezone(self.timezone(tz, line))
        if "tzinfo" in kwargs:
            kwargs = {**kwargs, "tzinfo": self.timezone(kwargs["tzinfo"], line)}
        return target.replace(*args, **kwargs)

    def library(self, symbol: Symbol, args: list[Any], kwargs: dict[str, Any], line: int) -> Any:
        """Calls into the standard library and pendulum whose results are fixed."""
        name = symbol.qualname
        if name in ("datetime.timedelta", "pendulum.duration", "pendulum.Duration"):
            return timedelta(*args, **kwargs)
        if name in (
            "datetime.datetime",
            "pendulum.datetime",
            "airflow.utils.timezone.datetime",
            "pendulum.DateTime",
        ):
            return self._datetime(name, args, kwargs, line)
        if name in ("pendulum.parse", "pendulum.from_format") and name == "pendulum.parse":
            return self._parse(args, kwargs, line)
        if name in ("datetime.datetime.fromisoformat",):
            return datetime.fromisoformat(args[0])
        if name in (
            "pendulum.timezone",
            "pendulum.tz.timezone",
            "zoneinfo.ZoneInfo",
            "pendulum.Timezone",
            "pendulum.tz.Timezone",
        ):
            return self.timezone(args[0] if args else kwargs.get("name"), line)
        if name == "airflow.utils.dates.days_ago":
            raise EvaluationError(
                line,
                "days_ago() gives a start date that moves every time the file is parsed; "
                "Sluice needs a fixed one: write start_date=datetime(YYYY, M, D)",
            )
        if name.startswith(("pendulum.", "datetime.")) and name.rsplit(".", 1)[-1] in (
            "now",
            "today",
            "yesterday",
            "utcnow",
            "tomorrow",
        ):
            raise EvaluationError(
                line,
                f"{name}() depends on when the file is parsed; Sluice needs a fixed date: "
                "write datetime(YYYY, M, D)",
            )
        raise EvaluationError(line, f"{name}() is not something the converter reads statically")

    def _datetime(self, name: str, args: list[Any], kwargs: dict[str, Any], line: int) -> datetime:
        kwargs = dict(kwargs)
        tz: Any = kwargs.pop("tz", None) if name != "datetime.datetime" else None
        info = kwargs.pop("tzinfo", None)
        if len(args) > 7:
            info = args[7]
            args = args[:7]
        value = datetime(*args, **kwargs)
        chosen = tz if tz is not None else info
        if chosen is None and name != "datetime.datetime":
            chosen = "UTC"  # pendulum.datetime and airflow's timezone.datetime default to UTC
        if chosen is None:
            return value
        return value.replace(tzinfo=self.timezone(chosen, line))

    def _parse(self, args: list[Any], kwargs: dict[str, Any], line: int) -> datetime:
        text = args[0]
        if not isinstance(text, str):
            raise EvaluationError(line, "pendulum.parse of something that is not a string")
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
        tz = kwargs.get("tz", "UTC")
        if value.tzinfo is None:
            return value.replace(tzinfo=self.timezone(tz, line))
        return value

    def timezone(self, value: Any, line: int) -> tzinfo:
        if isinstance(value, str):
            return zone(value, line)
        if isinstance(value, ZoneInfo):
            return value
        if value == UTC:
            return ZoneInfo("UTC")
        raise EvaluationError(line, "a time zone that is not an IANA name; write e.g. 'UTC'")

    # -- helpers ------------------------------------------------------------------------

    def _plain(self, value: Any, line: int) -> Any:
        """A value Python operators may touch: no symbols or converter objects."""
        if isinstance(value, Symbol | Builtin | BoundMethod):
            raise EvaluationError(line, f"{getattr(value, 'qualname', value)} used as a value")
        return value

    def _iterate(self, value: Any, line: int) -> list[Any]:
        if isinstance(value, Mapping):
            return list(value)
        if isinstance(value, list | tuple | str):
            return list(value)
        raise EvaluationError(line, "a loop over something not read statically")

    def _bounded_repeat(self, left: Any, right: Any, line: int) -> None:
        for sequence, count in ((left, right), (right, left)):
            too_large = (
                isinstance(sequence, str | list | tuple)
                and isinstance(count, int)
                and (len(sequence) * count > MAX_ITEMS * 10)
            )
            if too_large:
                raise EvaluationError(line, "a repeated string or list too large to build")


def bind(scope: dict[str, Any], target: ast.expr, value: Any) -> None:
    """Assign `value` to an assignment target (a name, or tuples of names)."""
    if isinstance(target, ast.Name):
        scope[target.id] = value
        return
    if isinstance(target, ast.Tuple | ast.List):
        if isinstance(value, Unknown):
            for element in target.elts:
                bind(scope, element, value)
            return
        items = list(value) if isinstance(value, list | tuple) else None
        if items is None or len(items) != len(target.elts):
            raise EvaluationError(target.lineno, "cannot unpack this value statically")
        for element, item in zip(target.elts, items, strict=True):
            bind(scope, element, item)
        return
    raise EvaluationError(target.lineno, "assignment to this target is not read statically")
