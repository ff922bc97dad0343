"""The conformance suite's own logic: judging a case, its diff, deviations, case files.

These need neither Airflow nor the recorded observations; the suite itself (Sluice
against Airflow's records) is tests/conformance, run by `make conformance`.
"""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from conformance import airflow_dags, cases, definitions, executions
from conformance.compare import (
    Outcome,
    Status,
    diff_observations,
    documented_deviations,
    judge,
    render,
    summary,
)


def run(day: int, hours: int = 24) -> dict[str, str]:
    start = datetime(2026, 11, day, tzinfo=UTC)
    end = start + timedelta(hours=hours)
    return {
        "logical_date": cases.instant(start) or "",
        "data_interval_start": cases.instant(start) or "",
        "data_interval_end": cases.instant(end) or "",
        "run_after": cases.instant(end) or "",
    }


def observations(*runs: dict[str, str], catchup: bool = True) -> dict[str, Any]:
    return {
        "definition": {"catchup": catchup, "tasks": {"work": {"retries": 0}}},
        "scheduled": list(runs),
        "next": None,
        "manual": [],
    }


# --- judge: every status --------------------------------------------------------------------


def test_same_observations_match() -> None:
    same = observations(run(1), run(2))
    assert judge("c", same, same) == Outcome("c", Status.MATCH)


def test_a_different_run_differs_and_fails() -> None:
    outcome = judge("c", observations(run(1), run(2)), observations(run(1), run(2, hours=25)))
    assert outcome.status is Status.DIFFERS
    assert not outcome.status.passes
    assert outcome.diff[0] == "scheduled:"


def test_documented_deviation_passes_with_its_diff() -> None:
    outcome = judge(
        "c",
        observations(catchup=True),
        observations(catchup=False),
        deviation="catchup-default",
        documented=frozenset({"catchup-default"}),
    )
    assert outcome.status is Status.DEVIATION
    assert outcome.status.passes
    assert "    - catchup = True" in outcome.diff


def test_deviation_missing_from_readme_fails() -> None:
    outcome = judge(
        "c", observations(catchup=True), observations(catchup=False), deviation="catchup-default"
    )
    assert outcome.status is Status.UNDOCUMENTED
    assert not outcome.status.passes


def test_deviation_that_no_longer_differs_fails() -> None:
    same = observations(run(1))
    outcome = judge("c", same, same, deviation="x", documented=frozenset({"x"}))
    assert outcome.status is Status.NO_LONGER_DIFFERS
    assert not outcome.status.passes


def test_unrecorded_and_stale_fail_before_comparing() -> None:
    assert judge("c", None, observations()).status is Status.UNRECORDED
    stale = judge("c", observations(run(1)), observations(run(2)), stale="case changed")
    assert stale.status is Status.STALE
    assert stale.diff == ()
    assert "case changed" in stale.note


# --- the diff a person reads ----------------------------------------------------------------


def test_diff_shows_a_shifted_run_as_one_line_each_side() -> None:
    airflow = observations(run(1), run(2), run(3), run(4))
    shifted = {**run(3), "data_interval_end": "2026-11-04T01:00:00Z"}
    sluice = observations(run(1), run(2), shifted, run(4))
    lines = diff_observations(airflow, sluice)
    assert [line[:6] for line in lines if line[4:6] in ("- ", "+ ")] == ["    - ", "    + "]
    assert sum(1 for line in lines if line.startswith("      ")) == 2  # context either side
    assert "2026-11-04T01:00:00Z" in lines[-2]


def test_diff_names_definition_fields_by_path() -> None:
    airflow = observations()
    sluice = observations()
    sluice["definition"] = {"catchup": True, "tasks": {"work": {"retries": 2}}}
    lines = diff_observations(airflow, sluice)
    assert "    - tasks.work.retries = 0" in lines
    assert "    + tasks.work.retries = 2" in lines


def test_missing_next_and_manual_sections() -> None:
    airflow = observations()
    sluice = {**observations(), "next": run(5)}
    lines = diff_observations(airflow, sluice)
    assert lines[:2] == ["next:", "  @@"]
    assert lines[2] == "    - none"


def test_runs_diff_shows_each_task_that_ended_otherwise() -> None:
    def executed(flaky: tuple[str, int], run_state: str) -> dict[str, Any]:
        tasks = {"after": ("success", 1), "flaky": flaky}
        return {
            "runs": [executions.run_record(datetime(2026, 11, 1, tzinfo=UTC), run_state, tasks)]
        }

    diff = diff_observations(executed(("success", 3), "success"), executed(("failed", 2), "failed"))
    assert diff == [
        "runs:",
        "  @@",
        "    - run 2026-11-01T00:00:00Z: success",
        "    + run 2026-11-01T00:00:00Z: failed",
        "        after: success, try 1",
        "    -   flaky: success, try 3",
        "    +   flaky: failed, try 2",
    ]
    # An executed case has no schedule sections on either side: none is compared.
    assert (
        diff_observations(executed(("success", 3), "success"), executed(("success", 3), "success"))
        == []
    )


def test_executed_runs_are_read_from_standalone_json() -> None:
    summaries = [
        {
            "dag": "d",
            "run_id": "scheduled__x",
            "logical_date": "2026-11-01T01:00:00+01:00",
            "state": "failed",
            "tasks": [
                {"task": "b", "state": "upstream_failed", "try_number": 0},
                {"task": "a", "state": "failed", "try_number": 3},
            ],
        }
    ]
    assert executions.runs_of(summaries) == {
        "d": [
            {
                "logical_date": "2026-11-01T00:00:00Z",
                "state": "failed",
                "tasks": {
                    "a": {"state": "failed", "try_number": 3},
                    "b": {"state": "upstream_failed", "try_number": 0},
                },
            }
        ]
    }


def test_render_and_summary() -> None:
    failing = Outcome("a", Status.DIFFERS, ("scheduled:", "    - x", "    + y"))
    lines = render(failing, "schedule", "what it checks", "2.10.5")
    assert lines[0] == "FAIL schedule/a vs Airflow 2.10.5: differs"
    assert lines[-1] == "       + y"
    ok = render(Outcome("b", Status.MATCH), "schedule", "", "3.3.2")
    assert ok == ["ok   schedule/b vs Airflow 3.3.2: match"]
    text = summary(
        {
            "Airflow 2": [Outcome("a", Status.MATCH), Outcome("b", Status.DEVIATION), failing],
            "Airflow 3": [Outcome("a", Status.MATCH)] * 3,
        },
        3,
    )
    assert text == (
        "conformance FAILED: 3 cases; Airflow 2: 1 match, 1 documented deviation(s), 1 differs; "
        "Airflow 3: 3 match, 0 documented deviation(s)"
    )
    assert summary({"Airflow 3": [Outcome("a", Status.MATCH)]}, 1).startswith(
        "conformance passed: "
    )


def test_documented_deviations_are_read_from_the_semantics_section_only() -> None:
    readme = (
        "# X\n\n## Semantics (Airflow's)\n\n- **Deviation `one`**: because.\n"
        "  - **Deviation `two-2`**: nested.\n\n## Other\n\n- **Deviation `three`**: no.\n"
    )
    assert documented_deviations(readme) == {"one", "two-2"}
    assert documented_deviations("- **Deviation `one`**: no section.") == frozenset()


def test_documented_deviations_read_a_semantics_page_and_its_subsections() -> None:
    page = (
        "# Semantics (Airflow's)\n\n- **Deviation `one`**: because.\n\n"
        "## Checked against a real Airflow\n\n- **Deviation `two`**: observed.\n"
    )
    assert documented_deviations(page) == {"one", "two"}
    # A README that only summarises them (a table, a link) documents none.
    readme = "# X\n\n## Semantics at a glance\n\n| `one` | because |\n"
    assert documented_deviations(readme) == frozenset()


def test_docs_semantics_documents_the_deviations_cases_use() -> None:
    semantics = (Path(__file__).parents[2] / "docs" / "semantics.md").read_text()
    used = {token.partition("@")[0] for case in cases.load_all() for token in case.deviations}
    assert used
    assert used <= documented_deviations(semantics)


# --- case files ----------------------------------------------------------------------------

MANIFEST = """\
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata:
  name: {name}
  annotations:
{notes}
spec:
  schedule: "@daily"
  startDate: 2026-11-01T00:00:00Z
  tasks:
    - name: work
      image: busybox:1.36
      command: [sh, -c]
      args: ['echo hi']
"""


def write_case(
    tmp_path: Path, notes: str, name: str = "a-case", area_name: str = "schedule"
) -> Path:
    area = tmp_path / area_name
    area.mkdir(parents=True, exist_ok=True)
    path = area / f"{name}.yaml"
    path.write_text(MANIFEST.format(name=name, notes=notes))
    return path


def test_case_reads_its_scenario_from_annotations(tmp_path: Path) -> None:
    path = write_case(
        tmp_path,
        '    conformance.sluice.io/about: "x"\n'
        '    conformance.sluice.io/now: "2026-12-01T01:00:00+01:00"\n'
        '    conformance.sluice.io/manual-runs: "2026-11-02T00:00:00Z 2026-11-03T00:00:00Z"\n'
        '    conformance.sluice.io/last-run: "2026-11-01T00:00:00Z 2026-11-02T00:00:00Z"\n'
        "    conformance.sluice.io/deviation: catchup-default@2",
    )
    case = cases.load(path)
    assert case.now == datetime(2026, 12, 1, tzinfo=UTC)
    assert case.manual_runs == (
        datetime(2026, 11, 2, tzinfo=UTC),
        datetime(2026, 11, 3, tzinfo=UTC),
    )
    assert case.last_run == (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC))
    assert case.area == "schedule"
    assert case.deviation_for("2.10.5") == "catchup-default"
    assert case.deviation_for("3.3.2") is None


@pytest.mark.parametrize(
    ("notes", "message"),
    [
        pytest.param('    conformance.sluice.io/about: "x"', "now is required", id="no-now"),
        pytest.param(
            '    conformance.sluice.io/about: "x"\n    conformance.sluice.io/now: "2026-12-01"',
            "no UTC offset",
            id="naive-now",
        ),
        pytest.param(
            '    conformance.sluice.io/about: "x"\n    conformance.sluice.io/now: "2026-12-01Z"\n'
            '    conformance.sluice.io/nwo: "typo"',
            "unknown annotation",
            id="typo",
        ),
        pytest.param(
            '    conformance.sluice.io/about: "x"\n'
            '    conformance.sluice.io/now: "2026-12-01T00:00:00Z"\n'
            '    conformance.sluice.io/last-run: "2026-11-01T00:00:00Z"',
            "last-run is 'START END'",
            id="last-run-without-end",
        ),
    ],
)
def test_bad_case_files_are_refused(tmp_path: Path, notes: str, message: str) -> None:
    with pytest.raises(cases.CaseError, match=message):
        cases.load(write_case(tmp_path, notes))


def test_an_executed_case_has_no_now(tmp_path: Path) -> None:
    """A dependencies or retries case runs at the real time: no instant to observe at."""
    about = '    conformance.sluice.io/about: "x"'
    case = cases.load(write_case(tmp_path, about, area_name="retries"))
    assert case.executes
    assert case.now is None
    assert not cases.load(
        write_case(tmp_path, about + '\n    conformance.sluice.io/now: "2026-12-01T00:00:00Z"')
    ).executes
    with pytest.raises(cases.CaseError, match=r"runs at the real time; drop .*now"):
        cases.load(
            write_case(
                tmp_path,
                about + '\n    conformance.sluice.io/now: "2026-12-01T00:00:00Z"',
                name="b-case",
                area_name="dependencies",
            )
        )


def test_case_named_unlike_its_file_is_refused(tmp_path: Path) -> None:
    path = write_case(tmp_path, '    conformance.sluice.io/about: "x"')
    path.rename(path.with_name("other.yaml"))
    with pytest.raises(cases.CaseError, match="name it after its file"):
        cases.load(path.with_name("other.yaml"))


def test_instant_is_utc_with_z() -> None:
    plus_one = timezone(timedelta(hours=1))
    assert cases.instant(datetime(2026, 1, 1, 1, tzinfo=plus_one)) == "2026-01-01T00:00:00Z"
    assert cases.instant(datetime(2026, 1, 1, microsecond=5, tzinfo=UTC)) == (
        "2026-01-01T00:00:00.000005Z"
    )
    assert cases.instant(None) is None
    with pytest.raises(ValueError, match="naive"):
        cases.instant(datetime(2026, 1, 1))


# --- the generated Airflow DAG says what the manifest says -----------------------------------


def test_generated_dag_is_python_with_the_manifest_s_values() -> None:
    case = cases.load(cases.CASES / "schedule" / "dst-daily-repeated-hour.yaml")
    text = airflow_dags.source(case)
    ast.parse(text)
    assert "schedule='30 2 * * *'," in text
    assert "pendulum.parse('2026-10-21T22:00:00Z').in_timezone('Europe/Berlin')" in text
    assert "catchup=True," in text
    assert "max_active_runs=" not in text  # not in the manifest: Airflow's default stays


def test_defaults_become_default_args_and_tasks_repeat_only_what_differs() -> None:
    case = cases.load(cases.CASES / "retries" / "retries-in-defaults.yaml")
    text = airflow_dags.source(case)
    ast.parse(text)
    assert "    default_args={\n        'retries': 1,\n" in text
    assert "'retry_delay': datetime.timedelta(seconds=2.0)," in text
    tasks = text.split("    tasks = {", 1)[1]
    assert tasks.count("retries=") == 2  # no-retries (0) and more-retries (2) only
    assert "retry_delay=" not in tasks
    assert "image" not in text  # no place for it in Airflow


def test_left_out_catchup_is_left_out_for_airflow_too() -> None:
    case = cases.load(cases.CASES / "schedule" / "catchup-default.yaml")
    assert "catchup=" not in airflow_dags.source(case)
    assert definitions.of_manifest(case.manifest)["catchup"] is False


def test_definition_maps_the_default_pool_and_shell_text() -> None:
    case = cases.load(cases.CASES / "schedule" / "preset-hourly.yaml")
    task = definitions.of_manifest(case.manifest)["tasks"]["work"]
    assert task["pool"] == "default_pool"
    assert task["command"].startswith("echo ")
    assert task["retry_delay"] == 300.0


# --- the standalone cross-check's reading of runs and logs ----------------------------------


def test_standalone_reads_runs_and_the_intervals_tasks_printed(tmp_path: Path) -> None:
    from conformance import standalone

    run_id = "scheduled__2026-11-01T00:00:00+00:00"
    log = tmp_path / "d" / run_id.replace(":", "_").replace("+", "_") / "work" / "1.log"
    log.parent.mkdir(parents=True)
    log.write_text("d for 2026-11-01T00:00:00+00:00 .. 2026-11-02T01:00:00+01:00\n")
    runs = [{"dag": "d", "run_id": run_id, "logical_date": "2026-11-01T00:00:00+00:00"}]
    runs[0]["state"] = "success"
    assert standalone.observed_runs(runs, tmp_path) == {
        "d": [("2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z", "success")]
    }


def test_standalone_takes_only_cases_the_clock_does_not_change() -> None:
    from conformance import standalone

    later = datetime(2030, 1, 1, tzinfo=UTC)
    by_name = {case.name: case for case in cases.load_all()}
    assert standalone.eligible(by_name["dst-daily-repeated-hour"], later)
    assert not standalone.eligible(by_name["retries-exhausted"], later)  # executed already
    assert not standalone.eligible(by_name["catchup-off"], later)  # the latest hour moves
    assert not standalone.eligible(by_name["manual-only"], later)  # manual runs
    expected = standalone.expected_runs(by_name["once-past"])
    assert expected == [("2026-11-01T10:00:00Z",) * 3 + ("success",)]


def test_digest_ignores_about_and_deviation_but_not_the_dag(tmp_path: Path) -> None:
    notes = (
        '    conformance.sluice.io/about: "x"\n'
        '    conformance.sluice.io/now: "2026-12-01T00:00:00Z"'
    )
    base = cases.load(write_case(tmp_path, notes)).digest
    annotated = (
        notes.replace('"x"', '"y"') + "\n    conformance.sluice.io/deviation: catchup-default"
    )
    assert cases.load(write_case(tmp_path, annotated)).digest == base
    later = notes.replace("2026-12-01T00", "2026-12-02T00")
    assert cases.load(write_case(tmp_path, later)).digest != base


# --- records: one entry per Airflow version, stale when the case or its DAG changed ----------


def record(version: str, case: cases.Case) -> Any:
    from conformance import records

    return records.Record(
        version=version,
        python="3.11.7",
        recorded_at="2026-12-04T10:00:00Z",
        case_sha256=case.digest,
        api={"scheduled": "x"},
        observations=observations(run(1)),
    )


def test_records_keep_each_version_and_tell_when_they_are_stale(tmp_path: Path) -> None:
    from conformance import airflow_dags, records

    notes = (
        '    conformance.sluice.io/about: "x"\n'
        '    conformance.sluice.io/now: "2026-12-01T00:00:00Z"'
    )
    case = cases.load(write_case(tmp_path / "cases", notes))
    expected, dags = tmp_path / "expected", tmp_path / "dags"
    records.save(record("2.10.5", case), case, expected)
    records.save(record("3.3.2", case), case, expected)
    loaded = records.load(case, expected)
    assert sorted(loaded) == ["2.10.5", "3.3.2"]
    assert loaded["2.10.5"].label == "Airflow 2.10.5 (recorded 2026-12-04)"
    assert loaded["3.3.2"].observations == observations(run(1))

    assert "generated Airflow DAG differs" in str(records.staleness(case, loaded["2.10.5"], dags))
    dags.mkdir()
    (dags / airflow_dags.file_name(case)).write_text(airflow_dags.source(case))
    assert records.staleness(case, loaded["2.10.5"], dags) is None
    later = cases.load(write_case(tmp_path / "cases", notes.replace("12-01", "12-02")))
    assert "changed since Airflow 2.10.5" in str(records.staleness(later, loaded["2.10.5"], dags))


def test_an_executed_case_reads_order_pools_triggers_and_wait(tmp_path: Path) -> None:
    case = cases.load(
        write_case(
            tmp_path,
            '    conformance.sluice.io/about: "x"\n'
            "    conformance.sluice.io/observe: order\n"
            '    conformance.sluice.io/pools: "a-case=1 other=3"\n'
            '    conformance.sluice.io/triggers: "2026-10-31T00:00:00Z"\n'
            '    conformance.sluice.io/wait: "40"',
            area_name="limits",
        )
    )
    assert case.executes
    assert case.observe == {"order"}
    assert case.pools == (("a-case", 1), ("other", 3))
    assert case.triggers == (datetime(2026, 10, 31, tzinfo=UTC),)
    assert case.wait == 40.0
    plain = cases.load(
        write_case(tmp_path, '    conformance.sluice.io/about: "x"', "b-case", "limits")
    )
    assert plain.digest != case.digest


def test_a_params_case_triggers_with_its_conf_and_generates_params(tmp_path: Path) -> None:
    notes = (
        '    conformance.sluice.io/about: "x"\n'
        '    conformance.sluice.io/triggers: "2026-10-31T00:00:00Z"\n'
        '    conformance.sluice.io/trigger-conf: \'{"mode": "delta"}\''
    )
    path = write_case(tmp_path, notes, area_name="params")
    path.write_text(path.read_text().replace("spec:\n", "spec:\n  params: {mode: full, n: [1]}\n"))
    case = cases.load(path)
    assert case.executes
    assert case.trigger_conf == {"mode": "delta"}
    without = notes.rsplit("\n", 1)[0]
    other = write_case(tmp_path / "other", without, area_name="params")
    other.write_text(path.read_text().replace(notes, without))
    assert cases.load(other).digest != case.digest
    source = airflow_dags.source(case)
    assert "    params={'mode': 'full', 'n': [1]},\n" in source
    assert "    'SLUICE_PARAMS': '{{ params | tojson }}',\n" in source
    assert "    'SLUICE_PARAM_MODE': '{{ params.mode }}',\n" in source
    assert "SLUICE_PARAM_N'" not in source  # a list: JSON only
    assert definitions.of_manifest(case.manifest)["params"] == {"mode": "full", "n": [1]}
    plain = cases.load(
        write_case(tmp_path / "plain", '    conformance.sluice.io/about: "x"', area_name="params")
    )
    assert "params" not in definitions.of_manifest(plain.manifest)  # older records compare
    assert "params=" not in airflow_dags.source(plain)
    assert "SLUICE_PARAM" not in airflow_dags.source(plain)


@pytest.mark.parametrize(
    ("notes", "area", "message"),
    [
        (
            "    conformance.sluice.io/trigger-conf: '{}'",
            "params",
            "trigger-conf is the conf of conformance.sluice.io/triggers' runs",
        ),
        (
            '    conformance.sluice.io/triggers: "2026-10-31T00:00:00Z"\n'
            "    conformance.sluice.io/trigger-conf: '[1]'",
            "params",
            "trigger-conf is a JSON object",
        ),
        ("    conformance.sluice.io/observe: timing", "limits", "observe: unknown timing"),
        ('    conformance.sluice.io/pools: "p"', "limits", "pools are NAME=SLOTS"),
        ('    conformance.sluice.io/wait: "soon"', "limits", "wait is a whole number"),
        (
            '    conformance.sluice.io/now: "2026-12-01T00:00:00Z"\n'
            "    conformance.sluice.io/observe: order",
            "schedule",
            "are for executed cases",
        ),
    ],
)
def test_executed_annotations_are_checked(
    tmp_path: Path, notes: str, area: str, message: str
) -> None:
    with pytest.raises(cases.CaseError, match=message):
        cases.load(
            write_case(tmp_path, '    conformance.sluice.io/about: "x"\n' + notes, area_name=area)
        )


def test_a_backfill_case_reads_its_backfill(tmp_path: Path) -> None:
    case = cases.load(
        write_case(
            tmp_path,
            '    conformance.sluice.io/about: "x"\n'
            '    conformance.sluice.io/backfill: "2026-11-01T00:00:00Z 2026-11-03T00:00:00Z"\n'
            "    conformance.sluice.io/backfill-reprocess: completed\n"
            '    conformance.sluice.io/backfill-max-active-runs: "2"',
            area_name="backfill",
        )
    )
    assert case.executes
    assert case.backfill == cases.BackfillAsk(
        datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 3, tzinfo=UTC), "completed", 2
    )
    assert executions.backfill_command(case, "postgresql://db") == [
        "backfill",
        "a-case",
        "--start",
        "2026-11-01T00:00:00Z",
        "--end",
        "2026-11-03T00:00:00Z",
        "--reprocess",
        "completed",
        "--max-active-runs",
        "2",
        "--database-url",
        "postgresql://db",
    ]
    plain = cases.load(
        write_case(
            tmp_path,
            '    conformance.sluice.io/about: "x"\n'
            '    conformance.sluice.io/backfill: "2026-11-01T00:00:00Z 2026-11-03T00:00:00Z"',
            "b-case",
            "backfill",
        )
    )
    assert plain.backfill is not None
    assert (plain.backfill.reprocess, plain.backfill.max_active_runs) == ("none", None)
    assert "--max-active-runs" not in executions.backfill_command(plain, "postgresql://db")
    assert plain.digest != case.digest


@pytest.mark.parametrize(
    ("notes", "area", "message"),
    [
        ("", "backfill", "a backfill case needs"),
        (
            '    conformance.sluice.io/backfill: "2026-11-01T00:00:00Z"',
            "backfill",
            "is 'START END'",
        ),
        (
            '    conformance.sluice.io/backfill: "2026-11-03T00:00:00Z 2026-11-01T00:00:00Z"',
            "backfill",
            "START is after END",
        ),
        (
            '    conformance.sluice.io/backfill: "2026-11-01T00:00:00Z 2026-11-03T00:00:00Z"\n'
            "    conformance.sluice.io/backfill-reprocess: all",
            "backfill",
            "backfill-reprocess is one of none, failed, completed",
        ),
        (
            '    conformance.sluice.io/backfill: "2026-11-01T00:00:00Z 2026-11-03T00:00:00Z"\n'
            '    conformance.sluice.io/backfill-max-active-runs: "0"',
            "backfill",
            "whole number from 1",
        ),
        (
            '    conformance.sluice.io/backfill: "2026-11-01T00:00:00Z 2026-11-03T00:00:00Z"',
            "limits",
            "is for the backfill area's cases",
        ),
    ],
)
def test_backfill_annotations_are_checked(
    tmp_path: Path, notes: str, area: str, message: str
) -> None:
    with pytest.raises(cases.CaseError, match=message):
        cases.load(
            write_case(tmp_path, '    conformance.sluice.io/about: "x"\n' + notes, area_name=area)
        )


def test_a_clearing_case_reads_its_action_and_makes_sluice_s_commands(tmp_path: Path) -> None:
    case = cases.load(
        write_case(
            tmp_path,
            '    conformance.sluice.io/about: "x"\n'
            '    conformance.sluice.io/clear: "work downstream only-failed"\n'
            '    conformance.sluice.io/action-runs: "2026-11-02T00:00:00Z"\n'
            '    conformance.sluice.io/action-after: "30"',
            area_name="clearing",
        )
    )
    assert case.executes
    assert case.action == cases.ActionAsk(
        "clear",
        ("work",),
        downstream=True,
        only_failed=True,
        runs=(datetime(2026, 11, 2, tzinfo=UTC),),
        after=30.0,
    )
    runs = [
        {
            "dag": "a-case",
            "run_id": f"r{day}",
            "logical_date": f"2026-11-0{day}T00:00:00+00:00",
            "state": "failed",
        }
        for day in (1, 2)
    ] + [
        {
            "dag": "other",
            "run_id": "x",
            "logical_date": "2026-11-02T00:00:00+00:00",
            "state": "running",
        }
    ]
    assert executions.action_commands(case, runs, "postgresql://db") == [
        [
            "tasks",
            "clear",
            "a-case",
            "--run",
            "r2",
            "--task",
            "work",
            "-d",
            "--only-failed",
            "--yes",
            "--database-url",
            "postgresql://db",
        ]
    ]
    runs[1].update(state="running", tasks=[{"task": "work", "state": "none"}])
    assert len(executions.action_commands(case, runs, "postgresql://db")) == 1  # it waits
    runs[1]["tasks"] = [{"task": "work", "state": "running"}]
    with pytest.raises(executions.NotReady, match="have a task under way"):
        executions.action_commands(case, runs, "postgresql://db")

    mark = cases.load(
        write_case(
            tmp_path,
            '    conformance.sluice.io/about: "x"\n'
            '    conformance.sluice.io/mark: "work failed upstream"',
            "b-case",
            "clearing",
        )
    )
    assert mark.action == cases.ActionAsk("mark", ("work",), "failed", upstream=True)
    every = [dict(run, dag="b-case", state="success") for run in runs[:2]]
    assert [command[:6] for command in executions.action_commands(mark, every, "u")] == [
        ["tasks", "mark", "b-case", "failed", "--run", "r1"],
        ["tasks", "mark", "b-case", "failed", "--run", "r2"],
    ]
    assert mark.digest != case.digest
    whole = cases.load(
        write_case(
            tmp_path,
            '    conformance.sluice.io/about: "x"\n    conformance.sluice.io/clear: "*"',
            "c-case",
            "clearing",
        )
    )
    assert whole.action is not None
    assert whole.action.tasks == ()
    assert "--task" not in executions.action_commands(whole, [dict(runs[0], dag="c-case")], "u")[0]
    with pytest.raises(RuntimeError, match="no run to act on"):
        executions.action_commands(whole, every, "u")


def test_airflow_s_clear_and_mark_commands(tmp_path: Path) -> None:
    from conformance.airflow_runs import MARKER, AirflowRuns

    case = cases.load(
        write_case(
            tmp_path,
            '    conformance.sluice.io/about: "x"\n'
            '    conformance.sluice.io/clear: "work upstream only-failed"',
            area_name="clearing",
        )
    )
    day = datetime(2026, 11, 2, tzinfo=UTC)
    commands = {}
    for version in ("2.10.5", "3.3.2"):
        runner = object.__new__(AirflowRuns)  # no Postgres: only the commands
        runner.major, runner.airflow = int(version[0]), "/venv/bin/airflow"
        commands[version] = runner.clear_command(case, day, day)
    tail = ["-s", "2026-11-02T00:00:00Z", "-e", "2026-11-02T00:00:00Z", "-u", "-f", "-y"]
    assert commands["2.10.5"] == [
        "/venv/bin/airflow",
        "tasks",
        "clear",
        "a-case",
        "-t",
        "^(work)$",
        *tail,
    ]
    assert commands["3.3.2"] == [
        "/venv/bin/airflow",
        "tasks",
        "clear",
        "a-case",
        "-t",
        "work",
        *tail,
    ]
    mark = cases.load(
        write_case(
            tmp_path,
            '    conformance.sluice.io/about: "x"\n'
            '    conformance.sluice.io/mark: "work success downstream"',
            "b-case",
            "clearing",
        )
    )
    python, script, job = runner.mark_command(mark, ["r1", "r2"])
    assert (python, script) == ("/venv/bin/python", str(MARKER))
    assert json.loads(job) == {
        "dag_id": "b-case",
        "task_id": "work",
        "state": "success",
        "upstream": False,
        "downstream": True,
        "run_ids": ["r1", "r2"],
    }


@pytest.mark.parametrize(
    ("notes", "area", "message"),
    [
        ("", "clearing", "says either"),
        (
            '    conformance.sluice.io/clear: "work"\n'
            '    conformance.sluice.io/mark: "work success"',
            "clearing",
            "says either",
        ),
        ('    conformance.sluice.io/clear: "nope"', "clearing", "no task named nope"),
        ('    conformance.sluice.io/clear: "work sideways"', "clearing", "unknown option"),
        ('    conformance.sluice.io/clear: "* downstream"', "clearing", "drop downstream"),
        ('    conformance.sluice.io/mark: "work"', "clearing", "success|failed"),
        ('    conformance.sluice.io/mark: "work skipped"', "clearing", "success|failed"),
        ('    conformance.sluice.io/mark: "work success only-failed"', "clearing", "unknown"),
        (
            '    conformance.sluice.io/clear: "work"\n    conformance.sluice.io/action-after: "x"',
            "clearing",
            "whole number of seconds",
        ),
        (
            '    conformance.sluice.io/clear: "work"\n    conformance.sluice.io/wait: "9"',
            "clearing",
            "not wait",
        ),
        ('    conformance.sluice.io/clear: "work"', "limits", "for the clearing area"),
    ],
)
def test_clearing_annotations_are_checked(
    tmp_path: Path, notes: str, area: str, message: str
) -> None:
    with pytest.raises(cases.CaseError, match=message):
        cases.load(
            write_case(tmp_path, '    conformance.sluice.io/about: "x"\n' + notes, area_name=area)
        )


def _ran(task: str, start: float, end: float, day: int = 1) -> executions.Ran:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    return executions.Ran(
        cases.instant(datetime(2026, 11, day, tzinfo=UTC)) or "",
        task,
        t0 + timedelta(seconds=start),
        t0 + timedelta(seconds=end),
    )


def test_order_is_waves_of_what_had_ended_and_the_most_at_once() -> None:
    """One slot gives one task per wave in order; tasks side by side share a wave however
    their starts fell; a task that never started is left out."""
    order = executions.order_of(
        [
            _ran("b", 0.5, 4),  # beside a
            _ran("a", 0, 3),
            _ran("c", 3.2, 6),  # after a, while b still ran: wave 2
            _ran("d", 4.1, 7),  # after a and b: wave 2 still
            _ran("e", 7, 8, day=2),  # after d ended at the same instant: wave 3
            executions.Ran("2026-11-02T00:00:00Z", "never", None, None),
        ]
    )
    day1, day2 = "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"
    assert order == {
        "waves": [[f"{day1} a", f"{day1} b"], [f"{day1} c", f"{day1} d"], [f"{day2} e"]],
        "runs_at_once": 1,
        "tasks_at_once": 2,
    }
    assert diff_observations({"order": order}, {"order": order}) == []
    other = {**order, "tasks_at_once": 3}
    assert "    + at most 1 run(s) and 3 task(s) at once" in diff_observations(
        {"order": order}, {"order": other}
    )


def test_triggers_diff_shows_created_against_refused() -> None:
    asked = [executions.trigger_record(datetime(2026, 10, 31, tzinfo=UTC), None)]
    refused = [executions.trigger_record(datetime(2026, 10, 31, tzinfo=UTC), "before start")]
    assert diff_observations({"triggers": asked}, {"triggers": refused}) == [
        "triggers:",
        "  @@",
        "    - trigger 2026-10-31T00:00:00Z: created",
        "    + trigger 2026-10-31T00:00:00Z: refused",
    ]
