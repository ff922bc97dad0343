"""Running DAG files written with the SDK and collecting the manifests they define.

`sluice dags render` is the only place Python DAG files run: once, on the
author's machine or in CI, never in the scheduler. A file is imported as a
module of its own (its folder on `sys.path` while it runs, so it can import
helpers beside it); every DAG and Pool it creates is rendered. Whatever goes
wrong is a `FileProblem` naming the file and line, and nothing of that file
is kept, so a caller can refuse to print anything partial.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.sdk import collecting
from sluice.sdk.errors import AuthoringError
from sluice.sdk.pools import Pool


@dataclass
class Rendered:
    """The manifests of everything some files define: Pools first, then DAGs, in file order."""

    pools: list[dict[str, Any]] = field(default_factory=list)
    dags: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def manifests(self) -> list[dict[str, Any]]:
        return self.pools + self.dags


def python_files(path: Path) -> list[Path]:
    """A folder's DAG files (`*.py`, not those starting with `_`, not in subfolders), or the
    file itself."""
    if path.is_dir():
        return sorted(
            p for p in path.iterdir() if p.suffix == ".py" and p.is_file() and p.name[0] != "_"
        )
    return [path]


def render_paths(paths: list[Path]) -> Rendered:
    """The manifests for every DAG and Pool the files define, or every problem found."""
    rendered = Rendered()
    dag_files: dict[str, Path] = {}
    pools: dict[str, dict[str, Any]] = {}
    with _helpers_forgotten(paths):
        for path in paths:
            if not path.exists():
                rendered.problems.append(f"{path}: does not exist")
                continue
            files = python_files(path)
            if path.is_dir() and not files:
                rendered.problems.append(f"{path}: no Python DAG files (*.py) in this folder")
            for file in files:
                _render_file(file, rendered, dag_files, pools, alone=not path.is_dir())
    return rendered


@contextmanager
def _helpers_forgotten(paths: list[Path]) -> Iterator[None]:
    """Modules the DAG files import from beside them (helpers) are shared by the files of one
    render (one Pool object stays one) and forgotten after it, so the next render in this
    process imports them again as they are then."""
    folders = tuple(str((path if path.is_dir() else path.parent).resolve()) + "/" for path in paths)
    before = set(sys.modules)
    try:
        yield
    finally:
        for name in set(sys.modules) - before:
            origin = getattr(sys.modules[name], "__file__", None)
            if origin and str(Path(origin).resolve()).startswith(folders):
                del sys.modules[name]


def _render_file(
    file: Path,
    rendered: Rendered,
    dag_files: dict[str, Path],
    pools: dict[str, dict[str, Any]],
    *,
    alone: bool,
) -> None:
    if file.suffix != ".py":
        rendered.problems.append(
            f"{file}: not a Python file; `sluice dags validate` checks YAML manifests"
        )
        return
    try:
        collection = import_file(file)
        dags = [dag.manifest() for dag in collection.dags]
    except FileProblem as problem:
        rendered.problems.extend(str(problem).splitlines())
        return
    except AuthoringError as error:
        rendered.problems.extend(str(problem) for problem in error.problems)
        return
    if alone and not dags and not collection.pools:
        rendered.problems.append(f"{file}: defines no DAG or Pool (nothing to render)")
    used = [dag.defaults.get("pool") for dag in collection.dags]
    used += [task.fields.get("pool") for dag in collection.dags for task in dag.tasks]
    for pool in [*collection.pools, *(p for p in used if isinstance(p, Pool))]:
        manifest = pool.manifest()
        known = pools.setdefault(pool.name, manifest)
        if known != manifest:
            rendered.problems.append(
                f"{pool.defined_at or file}: Pool {pool.name!r} is defined twice, differently "
                f"({known['spec']} and {manifest['spec']}); make one Pool object and share it"
            )
        elif known is manifest:
            rendered.pools.append(manifest)
    for dag in dags:
        name = dag["metadata"]["name"]
        if name in dag_files:
            rendered.problems.append(
                f"{file}: DAG {name!r} is also defined in {dag_files[name]}; DAG names are "
                "unique across the cluster: rename one"
            )
            continue
        dag_files[name] = file
        rendered.dags.append(dag)


class FileProblem(Exception):
    """A DAG file that could not run: where (file and line) and why."""


def import_file(file: Path) -> collecting.Collection:
    """Run `file` as a fresh module; what it created, or a FileProblem."""
    digest = hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:12]
    module_name = f"sluice_dag_file_{file.stem.replace('-', '_')}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise FileProblem(f"{file}: cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    with collecting.collect() as collection, _module_installed(module_name, module, file):
        try:
            spec.loader.exec_module(module)
        except AuthoringError as error:
            # A problem found without a place (`>>` given a non-task) takes the traceback's.
            where = _where(error, file)
            lines = [str(p) if p.location else f"{where}: {p}" for p in error.problems]
            raise FileProblem("\n".join(lines)) from None
        except SyntaxError as exc:
            where = f"{exc.filename or file}:{exc.lineno or '?'}"
            raise FileProblem(f"{where}: SyntaxError: {exc.msg}") from None
        except (Exception, SystemExit) as exc:
            raise FileProblem(f"{_where(exc, file)}: {type(exc).__name__}: {exc}") from None
    return collection


@contextmanager
def _module_installed(name: str, module: object, file: Path) -> Iterator[None]:
    """The module in sys.modules and its folder on sys.path while it runs, then neither."""
    folder = str(file.resolve().parent)
    sys.modules[name] = module  # type: ignore[assignment]
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.modules.pop(name, None)
        if folder in sys.path:
            sys.path.remove(folder)


def _where(exc: BaseException, file: Path) -> str:
    """The deepest line of the traceback in `file` (else the deepest line of all)."""
    frames = traceback.extract_tb(exc.__traceback__)
    resolved = str(file.resolve())
    mine = [frame for frame in frames if str(Path(frame.filename).resolve()) == resolved]
    found = mine or frames
    return f"{found[-1].filename}:{found[-1].lineno}" if found else str(file)
