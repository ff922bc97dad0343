"""`sluice dags render`: Python DAG files to manifests that `sluice dags validate` accepts."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sluice.cli.commands import app
from sluice.cli.common import load_manifests
from sluice.cli.dags_render import render_command
from sluice.cli.dags_validate import validate_command
from sluice.spec.validation import load_dag_documents, parse_dag_manifest

HEADER = """\
from datetime import UTC, datetime
from sluice.sdk import DAG, Pool
"""


def write(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def render(*paths: Path, output: str = "yaml") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = render_command(list(paths), output, out, err)
    return code, out.getvalue(), err.getvalue()


ONE = """\
dag = DAG("one", schedule="@daily", start_date=datetime(2026, 12, 1, tzinfo=UTC))
a = dag.task("a", image="busybox", args=["line 1\\nline 2\\n"])
b = dag.task("b", image="busybox")
a >> b
"""


def test_a_file_renders_to_a_stream_that_validates(tmp_path: Path) -> None:
    file = write(tmp_path, "one.py", ONE)
    code, out, err = render(file)
    assert (code, err) == (0, "")
    assert out.startswith(
        "---\napiVersion: sluice.io/v1alpha1\nkind: DAG\nmetadata:\n  name: one\n"
    )
    assert "  - |\n      line 1\n      line 2\n" in out  # scripts stay readable
    (manifest,) = yaml.safe_load_all(out)
    assert manifest["spec"]["tasks"][1] == {"name": "b", "dependsOn": ["a"], "image": "busybox"}
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(out)
    assert validate_command([rendered]) == 0
    (model,) = load_dag_documents(out)
    assert model == parse_dag_manifest(manifest)


def test_a_folder_renders_every_file_pools_first(tmp_path: Path) -> None:
    (tmp_path / "_shared.py").write_text(
        "from sluice.sdk import Pool\nGPU = Pool('gpu', slots=2, description='two cards')\n"
    )
    write(
        tmp_path,
        "b_second.py",
        'from _shared import GPU\nDAG("second").task("t", image="x", pool=GPU)\n',
    )
    write(tmp_path, "a_first.py", 'DAG("first").task("t", image="x")\nPool("cpu", slots=8)\n')
    (tmp_path / "notes.txt").write_text("not a DAG file")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "nested.py", 'DAG("nested").task("t", image="x")\n')
    code, out, err = render(tmp_path)
    assert (code, err) == (0, "")
    docs = list(yaml.safe_load_all(out))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Pool", "cpu"),
        ("Pool", "gpu"),
        ("DAG", "first"),
        ("DAG", "second"),
    ]
    assert docs[1]["spec"] == {"slots": 2, "description": "two cards"}
    stream = tmp_path / "all.yaml.out"
    stream.write_text(out)
    assert validate_command([stream]) == 0


def test_json_is_one_list(tmp_path: Path) -> None:
    write(tmp_path, "one.py", ONE + 'Pool("p", slots=1)\n')
    code, out, _ = render(tmp_path / "one.py", output="json")
    assert code == 0
    listing = json.loads(out)
    assert (listing["apiVersion"], listing["kind"]) == ("v1", "List")
    assert [item["kind"] for item in listing["items"]] == ["Pool", "DAG"]
    assert parse_dag_manifest(listing["items"][1]).spec.task("b").depends_on == ["a"]


def test_rendering_is_byte_stable(tmp_path: Path) -> None:
    file = write(tmp_path, "one.py", ONE)
    assert render(file)[1] == render(file)[1]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("dag = DAG('x'\n", "bad.py:3: SyntaxError: "),
        ("x = 1\nraise RuntimeError('boom')\n", "bad.py:4: RuntimeError: boom"),
        ("import no_such_module_here\n", "bad.py:3: ModuleNotFoundError: No module named"),
        (
            "dag = DAG('x')\ndag.task('t', image='b', retries=-1)\n",
            "bad.py:4: DAG 'x', task 't', field retries: must be at least 0, got -1",
        ),
        (
            "d = DAG('x', defaults={'image': 'b'})\n"
            "a = d.task('a')\nb = d.task('b')\na >> b >> a\n",
            "bad.py:4: DAG 'x', task 'a', field dependencies (>> and <<): dependency cycle",
        ),
        ("d = DAG('x')\nd.task('a', image='b') >> 'c'\n", "bad.py:4: `>>` and `<<` take tasks"),
        ("import sys\nsys.exit(3)\n", "bad.py:4: SystemExit: 3"),
        ("x = 1\n", "bad.py: defines no DAG or Pool"),
    ],
)
def test_a_bad_file_names_file_and_line_and_prints_nothing(
    tmp_path: Path, body: str, expected: str
) -> None:
    good = write(tmp_path, "good.py", ONE)
    bad = write(tmp_path, "bad.py", body)
    code, out, err = render(good, bad)
    assert (code, out) == (1, "")
    assert f"{tmp_path}/{expected}" in err, err
    assert err.endswith("nothing was rendered\n")


def test_a_dag_name_in_two_files(tmp_path: Path) -> None:
    write(tmp_path, "a.py", ONE)
    write(tmp_path, "b.py", ONE)
    code, out, err = render(tmp_path)
    assert (code, out) == (1, "")
    assert f"b.py: DAG 'one' is also defined in {tmp_path / 'a.py'}" in err


def test_one_pool_name_two_ways(tmp_path: Path) -> None:
    write(tmp_path, "a.py", 'Pool("p", slots=1)\n')
    write(tmp_path, "b.py", 'Pool("p", slots=2)\n')
    code, _, err = render(tmp_path)
    assert code == 1
    assert "Pool 'p' is defined twice, differently" in err


def test_paths_that_are_not_python_dag_files(tmp_path: Path) -> None:
    (tmp_path / "dag.yaml").write_text("kind: DAG\n")
    (tmp_path / "empty").mkdir()
    code, out, err = render(tmp_path / "dag.yaml", tmp_path / "missing.py", tmp_path / "empty")
    assert (code, out) == (1, "")
    assert err.splitlines()[:3] == [
        f"{tmp_path}/dag.yaml: not a Python file; `sluice dags validate` checks YAML manifests",
        f"{tmp_path}/missing.py: does not exist",
        f"{tmp_path}/empty: no Python DAG files (*.py) in this folder",
    ]
    assert render(tmp_path, output="xml")[0] == 2


def test_the_command_line(tmp_path: Path) -> None:
    write(tmp_path, "one.py", ONE)
    result = CliRunner().invoke(app, ["dags", "render", str(tmp_path), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["items"][0]["metadata"]["name"] == "one"
    write(tmp_path, "two.py", "raise ValueError('no')\n")
    result = CliRunner().invoke(app, ["dags", "render", str(tmp_path)])
    assert result.exit_code == 1
    assert "two.py:3: ValueError: no" in result.stderr


def test_validate_checks_pool_documents(tmp_path: Path) -> None:
    stream = tmp_path / "pools.yaml"
    stream.write_text(
        "apiVersion: sluice.io/v1alpha1\nkind: Pool\nmetadata: {name: ok}\nspec: {slots: 1}\n"
        "---\napiVersion: sluice.io/v1alpha1\nkind: Pool\nmetadata: {name: Bad_}\n"
        "spec: {slots: -1}\n"
    )
    out, err = io.StringIO(), io.StringIO()
    assert validate_command([stream], out, err) == 1
    assert out.getvalue().splitlines() == [
        f"{stream}: Pool/Bad_: metadata.name: 'Bad_' is not a valid name: use lowercase letters, "
        "digits, '-' and '.', starting and ending with a letter or digit",
        f"{stream}: Pool/Bad_: spec.slots: must be a whole number >= 0, got -1",
    ]
    assert "1 valid, 1 invalid Pool document(s)" in err.getvalue()


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_each_example_renders_to_its_yaml_twin() -> None:
    """Semantically equal: both loaded through the models compare equal (and hash alike)."""
    code, out, err = render(EXAMPLES / "python")
    assert (code, err) == (0, "")
    rendered = {m.metadata.name: m for m in load_dag_documents(out)}  # type: ignore[union-attr]
    twins = {path.stem: path for path in EXAMPLES.glob("*.yaml")}
    assert sorted(rendered) == sorted(twins)  # every YAML example has a Python twin
    for name, manifest in rendered.items():
        (expected,) = load_dag_documents(twins[name].read_text())
        assert manifest == expected, name
    # The comparison can fail: one changed field makes the twins differ.
    hello = rendered["hello"]
    changed = hello.spec.model_copy(update={"catchup": True})
    assert hello.model_copy(update={"spec": changed}) != rendered["hello"].model_copy()


def test_standalone_on_examples_loads_only_the_yaml_dags() -> None:
    # `make demo` runs `sluice standalone examples/`: the Python twins must not load twice.
    names = sorted(m.metadata.name for m in load_manifests([EXAMPLES]))
    assert names == sorted(path.stem for path in EXAMPLES.glob("*.yaml"))


def test_pools_in_dag_defaults_are_rendered_and_helpers_are_imported_afresh(
    tmp_path: Path,
) -> None:
    for slots in (1, 2):  # the same helper module name, changed between two renders
        folder = tmp_path / f"run{slots}"
        folder.mkdir()
        (folder / "_pools.py").write_text(
            f"from sluice.sdk import Pool\nP = Pool('p', slots={slots})\n"
        )
        write(
            folder,
            "d.py",
            'from _pools import P\nDAG("d", defaults={"image": "x", "pool": P}).task("t")\n',
        )
        code, out, err = render(folder)
        assert (code, err) == (0, "")
        pool, dag = yaml.safe_load_all(out)
        assert (pool["spec"], dag["spec"]["defaults"]["pool"]) == ({"slots": slots}, "p")
