"""`sluice convert` constructs one by one: what each becomes, and what each refuses and why."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from sluice.convert import Conversion, ConvertError, convert_file, convert_source
from sluice.spec.models import DagManifest
from sluice.spec.validation import load_dag_documents

HEAD = """\
from datetime import datetime, timedelta
from airflow import DAG
from airflow.models.baseoperator import chain, cross_downstream
from airflow.operators.bash import BashOperator
from airflow.operators.empty import EmptyOperator
from airflow.utils.task_group import TaskGroup
"""


def convert(body: str, head: str = HEAD) -> Conversion:
    return convert_source(head + textwrap.dedent(body), "dag.py")


def manifest(conversion: Conversion) -> DagManifest:
    assert [f.render() for f in conversion.gaps] == []
    (document,) = conversion.documents
    (parsed,) = load_dag_documents(document.text)
    assert isinstance(parsed, DagManifest)
    return parsed


def edges(conversion: Conversion) -> set[tuple[str, str]]:
    spec = manifest(conversion).spec
    return {(up, task.name) for task in spec.tasks for up in task.depends_on}


def gaps(conversion: Conversion) -> list[str]:
    return [finding.message for finding in conversion.gaps]


def dag(tasks: str, **arguments: Any) -> str:
    given = "".join(f", {name}={value}" for name, value in arguments.items())
    return (
        f"with DAG('d', schedule=None, start_date=datetime(2026, 1, 1){given}):\n"
        + textwrap.indent(textwrap.dedent(tasks), "    ")
    )


def bash(name: str) -> str:
    return f"{name} = BashOperator(task_id='{name}', bash_command='echo {name}')\n"


def test_shift_operators_lists_and_methods_make_the_same_edges() -> None:
    body = "".join(bash(n) for n in "abcdef") + (
        "a >> [b, c] >> d\nd << e\ne.set_downstream(f)\nf.set_upstream([a])\n"
    )
    assert edges(convert(dag(body))) == {
        ("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("e", "d"), ("e", "f"), ("a", "f"),
    }  # fmt: skip


def test_chain_pairs_lists_and_cross_downstream_crosses_them() -> None:
    body = "".join(bash(n) for n in "abcdefg") + "chain(a, [b, c], [d, e], f)\n"
    body += "cross_downstream([a, f], [g])\n"
    assert edges(convert(dag(body))) == {
        ("a", "b"), ("a", "c"), ("b", "d"), ("c", "e"), ("d", "f"), ("e", "f"),
        ("a", "g"), ("f", "g"),
    }  # fmt: skip


def test_chain_linear_links_every_task_of_one_element_to_every_task_of_the_next() -> None:
    head = HEAD + "from airflow.models.baseoperator import chain_linear\n"
    body = "".join(bash(n) for n in "abcd") + "chain_linear(a, [b, c], [d])\n"
    assert edges(convert(dag(body), head)) == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")}


def test_refused_edges_say_what_airflow_says() -> None:
    body = "".join(bash(n) for n in "abcd")
    assert "list >> a list" in gaps(convert(dag(body + "[a, b] >> [c, d]\n")))[0]
    assert "different lengths" in gaps(convert(dag(body + "chain([a, b], [c])\n")))[0]


def test_a_task_group_prefixes_ids_and_links_by_its_roots_and_leaves() -> None:
    body = bash("start") + textwrap.dedent("""\
        with TaskGroup('load', default_args={'retries': 4}) as group:
            x = BashOperator(task_id='x', bash_command='x')
            y = BashOperator(task_id='y', bash_command='y')
            x >> y
        start >> group >> EmptyOperator(task_id='end')
    """)
    conversion = convert(dag(body))
    assert edges(conversion) == {("start", "load-x"), ("load-x", "load-y"), ("load-y", "end")}
    assert manifest(conversion).spec.task("load-x").retries == 4
    assert manifest(conversion).spec.task("end").retries == 0


def test_loops_comprehensions_constants_and_helpers_are_followed() -> None:
    body = textwrap.dedent("""\
        NAMES = ['a', 'b', 'c']
        def make(name, retries=1):
            return BashOperator(task_id=f'run_{name}', bash_command='run ' + name.upper(),
                                retries=retries)
        made = []
        for name in NAMES:
            if name == 'c':
                break
            made.append(make(name))
        extra = {n: make(n * 2, retries=0) for n in NAMES[:1]}
        made[0] >> made[1] >> extra['a']
    """)
    spec = manifest(convert(dag(body))).spec
    assert [task.name for task in spec.tasks] == ["run-a", "run-b", "run-aa"]
    assert spec.task("run-b").args == ["run B"]
    assert spec.task("run-aa").retries == 0
    assert spec.task("run-aa").depends_on == ["run-b"]


def test_dag_styles_all_read_the_same_dag() -> None:
    styles = [
        dag(bash("a")),
        "d = DAG('d', schedule=None, start_date=datetime(2026, 1, 1))\n"
        "a = BashOperator(task_id='a', bash_command='echo a', dag=d)\n",
        "from airflow.decorators import dag\n"
        "@dag(dag_id='d', schedule=None, start_date=datetime(2026, 1, 1))\n"
        "def make():\n    " + bash("a") + "make()\n",
    ]
    specs = [manifest(convert(style)).spec for style in styles]
    assert specs[0] == specs[1] == specs[2]


def test_an_uncalled_dag_function_makes_no_dag() -> None:
    body = "from airflow.decorators import dag\n@dag(schedule=None)\ndef never():\n    pass\n"
    assert "no DAG found" in gaps(convert(body))[0]


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("'@daily'", "@daily"),
        ("'@quarterly'", "0 0 1 */3 *"),
        ("'@annually'", "@yearly"),
        ("'0 */2 * * 1-5'", "0 */2 * * 1-5"),
        ("None", None),
        ("timedelta(minutes=15)", "*/15 * * * *"),
        ("timedelta(days=1)", "0 0 * * *"),
        ("timedelta(weeks=1)", "0 0 * * 4"),  # 2026-01-01 is a Thursday
    ],
)
def test_schedules(schedule: str, expected: str | None) -> None:
    body = (
        f"with DAG('d', schedule={schedule}, start_date=datetime(2026, 1, 1), catchup=True):\n"
        "    " + bash("a")
    )
    assert manifest(convert(body)).spec.schedule == expected


@pytest.mark.parametrize(
    ("schedule", "why"),
    [
        ("'@continuous'", "@continuous"),
        ("'0 0 * * * *'", "6 fields"),
        ("timedelta(hours=5)", "write the cron schedule you mean"),
        ("[Dataset('s3://x')]", "data-aware"),
    ],
)
def test_schedules_sluice_has_no_form_for(schedule: str, why: str) -> None:
    head = HEAD + "from airflow.datasets import Dataset\n"
    body = (
        f"with DAG('d', schedule={schedule}, start_date=datetime(2026, 1, 1), catchup=True):\n"
        "    " + bash("a")
    )
    assert any(why in message for message in gaps(convert(body, head)))


def test_a_timedelta_schedule_without_catchup_is_a_gap() -> None:
    body = dag(bash("a")).replace("schedule=None", "schedule=timedelta(hours=1)")
    assert "catchup=True" in gaps(convert(body + ""))[0]


def test_old_argument_names_and_default_args_dates() -> None:
    body = (
        "with DAG('d', schedule_interval='@hourly', concurrency=3,\n"
        "         default_args={'start_date': datetime(2026, 1, 1), 'retries': 2}):\n"
        "    " + bash("a")
    )
    spec = manifest(convert(body)).spec
    assert (spec.schedule, spec.max_active_tasks, spec.task("a").retries) == ("@hourly", 3, 2)
    assert spec.start_date is not None
    assert spec.start_date.isoformat() == "2026-01-01T00:00:00+00:00"


def test_a_zoned_start_date_gives_the_dag_its_time_zone() -> None:
    head = HEAD + "import pendulum\n"
    body = dag(bash("a")).replace(
        "datetime(2026, 1, 1)", "pendulum.datetime(2026, 3, 1, 2, 30, tz='Europe/Berlin')"
    )
    spec = manifest(convert(body, head)).spec
    assert spec.timezone == "Europe/Berlin"
    assert spec.start_date is not None
    assert spec.start_date.isoformat() == "2026-03-01T02:30:00+01:00"


def test_names_become_kubernetes_names_and_collisions_are_gaps() -> None:
    body = "with DAG('My_DAG', schedule=None):\n"
    body += "    a = BashOperator(task_id='Load_Data', bash_command='x')\n"
    conversion = convert(body)
    assert manifest(conversion).metadata.name == "my-dag"
    assert manifest(conversion).spec.tasks[0].name == "load-data"
    clash = dag(
        "BashOperator(task_id='a_b', bash_command='x')\n"
        "BashOperator(task_id='a-b', bash_command='x')\n"
    )
    assert "both become 'a-b'" in gaps(convert(clash))[0]


def test_a_duplicate_task_id_is_a_gap() -> None:
    body = dag(
        "BashOperator(task_id='a', bash_command='x')\nBashOperator(task_id='a', bash_command='y')\n"
    )
    assert "used twice" in gaps(convert(body))[0]


def test_statements_it_cannot_follow_are_gaps_with_their_line() -> None:
    body = dag(bash("a") + "while True:\n    break\nif a.owner:\n    " + bash("b"))
    conversion = convert(body)
    found = {(f.line, f.message.split(";")[0].split(":")[0]) for f in conversion.gaps}
    assert found == {(9, "a `While` statement is not converted"),
                     (11, "cannot decide this `if` statically")}  # fmt: skip


def test_unknown_arguments_are_gaps_and_descriptive_ones_notes() -> None:
    body = dag("BashOperator(task_id='a', bash_command='x', owner='me', cwd='/tmp', queue='q')\n")
    conversion = convert(body)
    assert gaps(conversion) == ["cwd has no Sluice equivalent here"]
    notes = [f.message for f in conversion.all_findings if not f.is_gap]
    assert any(note.startswith("owner is not carried over") for note in notes)
    assert any(note.startswith("queue is not carried over") for note in notes)


def test_bash_env_templates_become_exports_and_identities_are_left_to_sluice() -> None:
    body = dag(
        "BashOperator(task_id='a', bash_command='run \"$DAY\"', env={'DAY': '{{ ds }}', "
        "'K': 'v', 'SLUICE_RUN_ID': '{{ run_id }}'})\n"
    )
    task = manifest(convert(body)).spec.tasks[0]
    assert task.args == ['export DAY="${SLUICE_LOGICAL_DATE%%T*}"\nrun "$DAY"']
    assert [(e.name, e.value) for e in task.env] == [("K", "v")]


def test_the_image_is_the_one_asked_for() -> None:
    conversion = convert_source(HEAD + dag(bash("a")), "dag.py", image="alpine:3.20")
    assert manifest(conversion).spec.tasks[0].image == "alpine:3.20"


def test_the_file_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "dag.py"
    path.write_text(
        HEAD + f"open({str(marker)!r}, 'w').write('x')\n"
        f"import os\nos.system('touch {marker}')\n" + dag(bash("a"))
    )
    conversion = convert_file(path)
    assert not marker.exists()
    assert len(conversion.documents) == 1
    assert len(conversion.gaps) == 2  # the two statements, reported, not run


def test_invalid_python_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("with DAG('d'):\n    a = (\n")
    with pytest.raises(ConvertError, match=r"bad\.py:2:\d+: invalid Python: .*fix the syntax"):
        convert_file(path)
    with pytest.raises(ConvertError, match="no such file"):
        convert_file(tmp_path / "missing.py")


def test_dag_params_become_spec_params_default_args_params_over_them() -> None:
    conversion = convert(
        dag(
            "t = BashOperator(task_id='t', bash_command='run {{ params.mode }} {{ params.n }}')",
            params="{'mode': 'full', 'n': 1, 'pair': (1, 2)}",
            default_args="{'params': {'n': 2}}",
        )
    )
    spec = manifest(conversion).spec
    assert spec.params == {"mode": "full", "n": 2, "pair": [1, 2]}  # a tuple: a JSON list
    assert spec.tasks[0].args == ['run "${SLUICE_PARAM_MODE}" "${SLUICE_PARAM_N}"']
    assert [f.message for f in conversion.all_findings if "params" in f.message] == []


def test_a_param_sluice_cannot_hold_is_a_gap_and_params_not_read_are_one() -> None:
    conversion = convert(dag("t = BashOperator(task_id='t', bash_command='true')", params="P"))
    assert gaps(conversion) == [
        "params is not a dict read statically: name 'P' is not defined in this file"
    ]
    conversion = convert(
        dag(
            "t = BashOperator(task_id='t', bash_command='echo {{ params.at }}')",
            params="{'at': datetime(2026, 1, 1), 'ok': 1}",
        )
    )
    assert gaps(conversion) == [
        "params['at']: a datetime is not a JSON value: Sluice's params are JSON; write it as a "
        "string ('2026-01-01T00:00:00')",
    ]
    (document,) = conversion.documents
    assert "  params:\n    ok: 1\n" in document.text
    # Airflow renders the default in its template, and so does the converted command.
    assert "- echo 2026-01-01 00:00:00\n" in document.text


def test_a_task_s_own_param_equal_to_the_dag_s_is_still_the_variable() -> None:
    conversion = convert(
        dag(
            "t = BashOperator(task_id='t', bash_command='echo {{ params.mode }}',"
            " params={'mode': 'full'})",
            params="{'mode': 'full'}",
        )
    )
    assert manifest(conversion).spec.tasks[0].args == ['echo "${SLUICE_PARAM_MODE}"']


def test_a_converted_command_reads_the_run_s_params(tmp_path: Path) -> None:
    """The converted script, run with the environment a run with conf gives its task,
    prints what Airflow renders for that run (dag_run_conf_overrides_params)."""
    import subprocess

    from sluice.spec import params

    conversion = convert(
        dag(
            "t = BashOperator(task_id='t', env={'N': '{{ params.n }}'},"
            " bash_command='echo \"{{ params.mode }}\" \\'{{ params.flag }}\\' $N')",
            params="{'mode': 'full', 'flag': False, 'n': 1}",
        )
    )
    spec = manifest(conversion).spec
    (script,) = spec.tasks[0].args
    for conf, printed in [
        ({}, "full False 1\n"),
        ({"mode": "two words", "flag": None, "n": 2.5}, "two words None 2.5\n"),
    ]:
        env = params.environment(spec.params, conf)
        done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)
        assert done.stdout == printed, script
