"""Airflow's template context onto Sluice's run context: each expression, and running it.

The shell forms are run with `sh` against a known run context, so the test
checks what a converted task prints, not only the text the converter wrote.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from sluice.convert import templates
from sluice.convert.params import TemplateParams
from sluice.executors.base import TaskLaunch

CONTEXT = {
    "SLUICE_DAG": "etl",
    "SLUICE_TASK": "load",
    "SLUICE_RUN_ID": "scheduled__2026-11-01T05:06:07+00:00",
    "SLUICE_LOGICAL_DATE": "2026-11-01T05:06:07+00:00",
    "SLUICE_DATA_INTERVAL_START": "2026-11-01T05:06:07+00:00",
    "SLUICE_DATA_INTERVAL_END": "2026-11-02T05:06:07.250000+00:00",
    "SLUICE_TRY_NUMBER": "2",
    "SLUICE_CONF": '{"a": 1}',
    "SLUICE_PARAM_TABLE": "users",
}
# `table` as a default written in, and as the variable a run's conf overrides.
STATIC = TemplateParams({"table": "users"})
VARIABLE = TemplateParams({"table": "users"}, {"table": "SLUICE_PARAM_TABLE"})

# What Airflow renders for each, given CONTEXT's run (its `ds`, `ts`, ... definitions).
RENDERED = [
    ("{{ ds }}", "2026-11-01"),
    ("{{ ds_nodash }}", "20261101"),
    ("{{ ts }}", "2026-11-01T05:06:07+00:00"),
    ("{{ ts_nodash }}", "20261101T050607"),
    ("{{ ts_nodash_with_tz }}", "20261101T050607+0000"),
    ("{{ logical_date }}", "2026-11-01T05:06:07+00:00"),
    ("{{ execution_date }}", "2026-11-01T05:06:07+00:00"),
    ("{{ data_interval_start | ds }}", "2026-11-01"),
    ("{{ data_interval_end | ds_nodash }}", "20261102"),
    ("{{ data_interval_end | ts_nodash }}", "20261102T050607"),
    ("{{ data_interval_end }}", "2026-11-02T05:06:07.250000+00:00"),
    ("{{ logical_date.strftime('%Y/%m/%d %H:%M') }}", "2026/11/01 05:06"),
    ("{{ run_id }}", "scheduled__2026-11-01T05:06:07+00:00"),
    ("{{ dag_run.run_id }}", "scheduled__2026-11-01T05:06:07+00:00"),
    ("{{ dag.dag_id }}", "etl"),
    ("{{ task.task_id }}", "load"),
    ("{{ ti.try_number }}", "2"),
    ("{{ task_instance.try_number }}", "2"),
    ("{{ dag_run.conf | tojson }}", '{"a": 1}'),
    ("{{ params.table }}", "users"),
    ("{{ params['table'] }}", "users"),
]


def sh(script: str) -> str:
    done = subprocess.run(
        ["sh", "-c", script], env=CONTEXT, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.mark.parametrize(("template", "rendered"), RENDERED)
@pytest.mark.parametrize("quoting", ["echo {}", 'echo "<{}>"', "echo '<{}>'"])
@pytest.mark.parametrize("params", [STATIC, VARIABLE], ids=["static", "variable"])
def test_a_command_prints_what_airflow_rendered(
    template: str, rendered: str, quoting: str, params: TemplateParams
) -> None:
    parsed = templates.parse(quoting.format(template), params)
    assert parsed.problems == []
    expected = quoting.format(rendered).removeprefix("echo ").strip("'\"")
    assert sh(templates.shell_script(parsed)) == expected + "\n"


@pytest.mark.parametrize(("template", "rendered"), RENDERED)
@pytest.mark.parametrize("params", [STATIC, VARIABLE], ids=["static", "variable"])
def test_an_env_value_is_one_word_with_the_rendered_value(
    template: str, rendered: str, params: TemplateParams
) -> None:
    parsed = templates.parse(f"it's {template} * x", params)
    word = templates.shell_word(parsed)
    assert sh(f'V={word}; printf %s "$V"') == f"it's {rendered} * x"


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("{{ macros.ds_add(ds, 1) }}", "macros"),
        ("{{ ti.xcom_pull(task_ids='a') }}", "XCom"),
        ("{{ var.value.bucket }}", "Variables"),
        ("{{ conn.db.host }}", "Connections"),
        ("{{ dag_run.conf['table'] }}", "$SLUICE_CONF"),
        ("{{ prev_ds }}", "date arithmetic"),
        ("{{ params.missing }}", "no static value"),
        ("{{ ds | upper }}", "filter `upper`"),
        ("{{ logical_date.strftime('%A') }}", "directives"),
        ("{% if ds %}x{% endif %}", "render time"),
        ("{{ ds ", "invalid Jinja template"),
        ("{{ unknown_name }}", "not in Sluice's run context"),
    ],
)
def test_what_has_no_sluice_form_is_a_problem_saying_why(template: str, why: str) -> None:
    parsed = templates.parse(template, VARIABLE)
    assert len(parsed.problems) == 1
    assert why in parsed.problems[0]


def test_conf_rendered_as_a_dict_is_converted_with_a_note() -> None:
    parsed = templates.parse("{{ dag_run.conf }}", TemplateParams({}))
    assert parsed.pieces == [templates.ContextValue("SLUICE_CONF")]
    assert "Python dict" in parsed.notes[0]


def test_a_param_with_a_variable_reads_it() -> None:
    parsed = templates.parse("{{ params.table }}", VARIABLE)
    assert parsed.pieces == [templates.ContextValue("SLUICE_PARAM_TABLE")]
    assert parsed.notes == []


def test_a_param_without_one_is_its_default_with_a_note_saying_why() -> None:
    params = TemplateParams({"n": 3, "flag": False, "none": None}, {}, {"n": "a reason"})
    parsed = templates.parse("{{ params.n }} {{ params.flag }} {{ params.none }}", params)
    assert parsed.pieces == ["3", " ", "False", " ", "None"]  # Airflow's Jinja: str()
    assert parsed.notes[0] == (
        "`{{ params.n }}` became its default 3 (a reason): a run's conf cannot override it here"
    )
    assert "(" not in parsed.notes[1]  # no reason given


def test_without_variables_every_param_is_written_in_saying_why() -> None:
    params = VARIABLE.without_variables("no variable here")
    parsed = templates.parse("{{ params.table }}", params)
    assert parsed.pieces == ["users"]
    assert "(no variable here)" in parsed.notes[0]


def test_a_param_with_no_static_value_is_a_problem() -> None:
    for params in (None, TemplateParams(None), TemplateParams({}, {"other": "SLUICE_PARAM_OTHER"})):
        parsed = templates.parse("{{ params.table }}", params)
        assert parsed.problems == [
            "`{{ params.table }}`: the DAG's params have no static value for 'table'"
        ]


def test_text_without_templates_is_left_as_it_is() -> None:
    text = 'echo "${#list}" {not a template}'
    parsed = templates.parse("echo '${HOME}' {not a template}", None)
    assert parsed.pieces == ["echo '${HOME}' {not a template}"]
    assert templates.parse(text, None).problems  # `{#` opens a Jinja comment, as on Airflow


def test_kubernetes_arguments_name_whole_variables_only() -> None:
    ok = templates.parse("--date={{ ts }} --cost=$(x)", None)
    assert templates.kubernetes_text(ok) == ("--date=$(SLUICE_LOGICAL_DATE) --cost=$$(x)", None)
    derived = templates.parse("--date={{ ds }}", None)
    text, why = templates.kubernetes_text(derived)
    assert text is None
    assert why is not None
    assert "whole variable" in why


def test_the_run_context_writes_instants_in_utc() -> None:
    berlin = datetime(2026, 11, 1, 1, 0, tzinfo=UTC).astimezone(
        __import__("zoneinfo").ZoneInfo("Europe/Berlin")
    )
    launch = TaskLaunch(
        ti_id=1, try_number=1, dag_id="d", task_id="t", run_id="r", logical_date=berlin,
        data_interval_start=berlin, data_interval_end=berlin + timedelta(days=1), conf={},
        image=None, command=[], args=[], env={}, execution_timeout=None,
        skip_on_exit_code=frozenset(),
    )  # fmt: skip
    env = launch.context_env()
    assert env["SLUICE_LOGICAL_DATE"] == "2026-11-01T01:00:00+00:00"
    assert env["SLUICE_DATA_INTERVAL_END"] == "2026-11-02T01:00:00+00:00"


def test_all_params_as_json_are_sluice_params() -> None:
    parsed = templates.parse("{{ params | tojson }}", VARIABLE)
    assert parsed.pieces == [templates.ContextValue("SLUICE_PARAMS")]
    assert parsed.notes == []
    bare = templates.parse("{{ params }}", VARIABLE)
    assert bare.pieces == [templates.ContextValue("SLUICE_PARAMS")]
    assert "Python dict" in bare.notes[0]
    own = TemplateParams({"table": "mine"}, {}, {}, "the task's own params are not in it")
    assert templates.parse("{{ params | tojson }}", own).problems == [
        "`{{ params | tojson }}`: $SLUICE_PARAMS is not these params: the task's own params "
        "are not in it"
    ]
    assert "only a param's value" in templates.parse("{{ params | upper }}", VARIABLE).problems[0]
