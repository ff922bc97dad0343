"""Trigger rules: every rule against Airflow 2.10's TriggerRuleDep (flag_upstream_failed=True).

The expected verdicts are Airflow's: a rule settles the task (`skipped` or
`upstream_failed`) as soon as the counters prove it can no longer be met,
runs it once the rule is met, and waits otherwise. A task with no upstream,
and any task with `always`, is ready at once.

The table below is the specification in examples; `test_matches_airflow_for_every_count`
then checks every possible counter combination for up to four upstreams against
an independent restatement of Airflow's rules.
"""

from __future__ import annotations

import itertools

import pytest

from sluice.spec.models import TriggerRule
from sluice.spec.states import TaskState
from sluice.spec.triggerrules import UpstreamCounts, Verdict, evaluate

R = TriggerRule
WAIT, RUN, SKIP, UF = Verdict.WAIT, Verdict.RUN, Verdict.SKIP, Verdict.UPSTREAM_FAILED


def c(total: int, s: int = 0, f: int = 0, sk: int = 0, uf: int = 0) -> UpstreamCounts:
    """`total` upstreams, of which s succeeded, f failed, sk skipped, uf upstream_failed."""
    return UpstreamCounts(total=total, success=s, failed=f, skipped=sk, upstream_failed=uf)


# (rule, counters, expected verdict, id)
CASES: list[tuple[TriggerRule, UpstreamCounts, Verdict, str]] = [
    # --- no upstream: always ready, whatever the rule -------------------------------------
    *[(rule, c(0), RUN, f"{rule.value}-no-upstream") for rule in TriggerRule],
    # --- always ------------------------------------------------------------------------
    (R.ALWAYS, c(3), RUN, "always-nothing-done"),
    (R.ALWAYS, c(3, f=3), RUN, "always-all-failed"),
    (R.ALWAYS, c(3, sk=2, uf=1), RUN, "always-skipped-and-upstream-failed"),
    # --- all_success -------------------------------------------------------------------
    (R.ALL_SUCCESS, c(3), WAIT, "all_success-nothing-done"),
    (R.ALL_SUCCESS, c(3, s=2), WAIT, "all_success-partial-success"),
    (R.ALL_SUCCESS, c(3, s=3), RUN, "all_success-all-success"),
    (R.ALL_SUCCESS, c(3, f=1), UF, "all_success-early-failed"),
    (R.ALL_SUCCESS, c(3, s=1, uf=1), UF, "all_success-early-upstream-failed"),
    (R.ALL_SUCCESS, c(3, sk=1), SKIP, "all_success-early-skipped"),
    (R.ALL_SUCCESS, c(3, sk=1, f=1), UF, "all_success-failure-beats-skip"),
    (R.ALL_SUCCESS, c(2, sk=2), SKIP, "all_success-all-skipped"),
    (R.ALL_SUCCESS, c(2, s=1, sk=1), SKIP, "all_success-done-success-and-skipped"),
    # --- all_failed --------------------------------------------------------------------
    (R.ALL_FAILED, c(3), WAIT, "all_failed-nothing-done"),
    (R.ALL_FAILED, c(3, f=1), WAIT, "all_failed-partial-failed"),
    (R.ALL_FAILED, c(3, f=3), RUN, "all_failed-all-failed"),
    (R.ALL_FAILED, c(3, f=2, uf=1), RUN, "all_failed-failed-and-upstream-failed"),
    (R.ALL_FAILED, c(2, uf=2), RUN, "all_failed-all-upstream-failed"),
    (R.ALL_FAILED, c(3, s=1), SKIP, "all_failed-early-success"),
    (R.ALL_FAILED, c(3, f=1, sk=1), SKIP, "all_failed-early-skipped"),
    # --- all_done ----------------------------------------------------------------------
    (R.ALL_DONE, c(3), WAIT, "all_done-nothing-done"),
    (R.ALL_DONE, c(3, f=1, sk=1), WAIT, "all_done-partial"),
    (R.ALL_DONE, c(4, s=1, f=1, sk=1, uf=1), RUN, "all_done-every-state"),
    (R.ALL_DONE, c(2, f=2), RUN, "all_done-all-failed"),
    (R.ALL_DONE, c(2, uf=2), RUN, "all_done-all-upstream-failed"),
    (R.ALL_DONE, c(2, sk=2), RUN, "all_done-all-skipped"),
    # --- all_skipped -------------------------------------------------------------------
    (R.ALL_SKIPPED, c(2), WAIT, "all_skipped-nothing-done"),
    (R.ALL_SKIPPED, c(2, sk=1), WAIT, "all_skipped-partial-skipped"),
    (R.ALL_SKIPPED, c(2, sk=2), RUN, "all_skipped-all-skipped"),
    (R.ALL_SKIPPED, c(3, s=1), SKIP, "all_skipped-early-success"),
    (R.ALL_SKIPPED, c(3, sk=1, f=1), SKIP, "all_skipped-early-failed"),
    (R.ALL_SKIPPED, c(3, uf=1), SKIP, "all_skipped-early-upstream-failed"),
    # --- one_success -------------------------------------------------------------------
    (R.ONE_SUCCESS, c(3), WAIT, "one_success-nothing-done"),
    (R.ONE_SUCCESS, c(3, s=1), RUN, "one_success-first-success-runs-early"),
    (R.ONE_SUCCESS, c(3, f=2), WAIT, "one_success-failures-but-one-pending"),
    (R.ONE_SUCCESS, c(3, sk=2), WAIT, "one_success-skips-but-one-pending"),
    (R.ONE_SUCCESS, c(3, sk=3), SKIP, "one_success-all-skipped"),
    (R.ONE_SUCCESS, c(3, f=3), UF, "one_success-all-failed"),
    (R.ONE_SUCCESS, c(2, uf=2), UF, "one_success-all-upstream-failed"),
    (R.ONE_SUCCESS, c(3, sk=2, f=1), UF, "one_success-skipped-and-failed"),
    (R.ONE_SUCCESS, c(3, s=1, f=1, uf=1), RUN, "one_success-done-with-one-success"),
    # --- one_failed --------------------------------------------------------------------
    (R.ONE_FAILED, c(3), WAIT, "one_failed-nothing-done"),
    (R.ONE_FAILED, c(3, f=1), RUN, "one_failed-first-failure-runs-early"),
    (R.ONE_FAILED, c(3, uf=1), RUN, "one_failed-upstream-failed-counts"),
    (R.ONE_FAILED, c(3, s=2), WAIT, "one_failed-successes-but-one-pending"),
    (R.ONE_FAILED, c(3, s=3), SKIP, "one_failed-all-success"),
    (R.ONE_FAILED, c(3, s=1, sk=2), SKIP, "one_failed-success-and-skipped"),
    (R.ONE_FAILED, c(2, sk=2), SKIP, "one_failed-all-skipped"),
    # --- one_done ----------------------------------------------------------------------
    (R.ONE_DONE, c(3), WAIT, "one_done-nothing-done"),
    (R.ONE_DONE, c(3, s=1), RUN, "one_done-first-success-runs-early"),
    (R.ONE_DONE, c(3, f=1), RUN, "one_done-first-failure-runs-early"),
    (R.ONE_DONE, c(3, uf=2), WAIT, "one_done-upstream-failed-is-not-done"),
    (R.ONE_DONE, c(3, sk=2), WAIT, "one_done-skips-but-one-pending"),
    (R.ONE_DONE, c(2, sk=2), SKIP, "one_done-all-skipped"),
    (R.ONE_DONE, c(2, uf=2), SKIP, "one_done-all-upstream-failed"),
    (R.ONE_DONE, c(3, sk=1, uf=2), SKIP, "one_done-skipped-and-upstream-failed"),
    # --- none_failed -------------------------------------------------------------------
    (R.NONE_FAILED, c(3), WAIT, "none_failed-nothing-done"),
    (R.NONE_FAILED, c(3, s=1, sk=1), WAIT, "none_failed-partial"),
    (R.NONE_FAILED, c(3, s=3), RUN, "none_failed-all-success"),
    (R.NONE_FAILED, c(3, sk=3), RUN, "none_failed-all-skipped"),
    (R.NONE_FAILED, c(3, s=1, sk=2), RUN, "none_failed-success-and-skipped"),
    (R.NONE_FAILED, c(3, f=1), UF, "none_failed-early-failed"),
    (R.NONE_FAILED, c(3, s=1, uf=1), UF, "none_failed-early-upstream-failed"),
    # --- none_failed_min_one_success ------------------------------------------------------
    (R.NONE_FAILED_MIN_ONE_SUCCESS, c(3), WAIT, "nfmos-nothing-done"),
    (R.NONE_FAILED_MIN_ONE_SUCCESS, c(3, s=2), WAIT, "nfmos-partial-success"),
    (R.NONE_FAILED_MIN_ONE_SUCCESS, c(3, sk=2), WAIT, "nfmos-skips-but-one-pending"),
    (R.NONE_FAILED_MIN_ONE_SUCCESS, c(3, s=3), RUN, "nfmos-all-success"),
    (R.NONE_FAILED_MIN_ONE_SUCCESS, c(3, s=1, sk=2), RUN, "nfmos-one-success-rest-skipped"),
    (R.NONE_FAILED_MIN_ONE_SUCCESS, c(3, sk=3), SKIP, "nfmos-all-skipped"),
    (R.NONE_FAILED_MIN_ONE_SUCCESS, c(3, f=1), UF, "nfmos-early-failed"),
    (R.NONE_FAILED_MIN_ONE_SUCCESS, c(3, uf=1), UF, "nfmos-early-upstream-failed"),
    (R.NONE_FAILED_MIN_ONE_SUCCESS, c(3, sk=2, f=1), UF, "nfmos-skipped-then-failed"),
    # --- none_skipped ------------------------------------------------------------------
    (R.NONE_SKIPPED, c(3), WAIT, "none_skipped-nothing-done"),
    (R.NONE_SKIPPED, c(3, s=2), WAIT, "none_skipped-partial"),
    (R.NONE_SKIPPED, c(3, s=3), RUN, "none_skipped-all-success"),
    (R.NONE_SKIPPED, c(3, s=1, f=2), RUN, "none_skipped-success-and-failed"),
    (R.NONE_SKIPPED, c(2, f=2), RUN, "none_skipped-all-failed"),
    (R.NONE_SKIPPED, c(3, s=1, f=1, uf=1), RUN, "none_skipped-with-upstream-failed"),
    (R.NONE_SKIPPED, c(3, sk=1), SKIP, "none_skipped-early-skipped"),
]


@pytest.mark.parametrize(
    ("rule", "counts", "expected"),
    [pytest.param(rule, counts, verdict, id=case_id) for rule, counts, verdict, case_id in CASES],
)
def test_evaluate(rule: TriggerRule, counts: UpstreamCounts, expected: Verdict) -> None:
    assert evaluate(rule, counts) is expected


def test_table_covers_every_rule_with_every_verdict_it_can_give() -> None:
    covered = {(rule, verdict) for rule, _, verdict, _ in CASES}
    assert {rule for rule, _ in covered} == set(TriggerRule)
    for rule in TriggerRule:
        if rule is R.ALWAYS:
            continue
        verdicts = {verdict for r, verdict in covered if r is rule}
        assert {WAIT, RUN} <= verdicts, rule
        if rule is not R.ALL_DONE:  # all_done never settles: it runs once everything is done
            assert verdicts & {SKIP, UF}, rule


def test_case_ids_are_unique() -> None:
    ids = [case_id for *_, case_id in CASES]
    assert len(ids) == len(set(ids))


# --- an independent restatement of Airflow 2.10's TriggerRuleDep -----------------------------


def airflow_verdict(rule: TriggerRule, n: UpstreamCounts) -> Verdict:
    """Airflow's answer: first the state it would set (flag_upstream_failed), then pass/fail."""
    if n.total == 0 or rule is R.ALWAYS:
        return RUN
    done = n.success + n.failed + n.skipped + n.upstream_failed
    upstream_done = done >= n.total
    failures = n.failed + n.upstream_failed
    settle: dict[TriggerRule, Verdict | None] = {
        R.ALL_SUCCESS: UF if failures else SKIP if n.skipped else None,
        R.ALL_FAILED: SKIP if n.success or n.skipped else None,
        R.ALL_DONE: None,
        R.ALL_SKIPPED: SKIP if n.success or failures else None,
        R.ONE_SUCCESS: (
            SKIP
            if upstream_done and done == n.skipped
            else UF
            if upstream_done and n.success == 0
            else None
        ),
        R.ONE_FAILED: SKIP if upstream_done and not failures else None,
        R.ONE_DONE: SKIP if upstream_done and not (n.failed or n.success) else None,
        R.NONE_FAILED: UF if failures else None,
        R.NONE_FAILED_MIN_ONE_SUCCESS: (UF if failures else SKIP if n.skipped == n.total else None),
        R.NONE_SKIPPED: SKIP if n.skipped else None,
    }
    if (settled := settle[rule]) is not None:
        return settled
    passes = {
        R.ALL_SUCCESS: n.success >= n.total,
        R.ALL_FAILED: failures >= n.total,
        R.ALL_DONE: upstream_done,
        R.ALL_SKIPPED: n.skipped >= n.total,
        R.ONE_SUCCESS: n.success > 0,
        R.ONE_FAILED: failures > 0,
        R.ONE_DONE: n.success + n.failed > 0,
        R.NONE_FAILED: n.success + n.skipped >= n.total,
        R.NONE_FAILED_MIN_ONE_SUCCESS: n.success + n.skipped >= n.total,
        R.NONE_SKIPPED: upstream_done and n.skipped == 0,
    }
    return RUN if passes[rule] else WAIT


def all_counts(max_total: int) -> list[UpstreamCounts]:
    result = []
    for total in range(max_total + 1):
        for s, f, sk, uf in itertools.product(range(total + 1), repeat=4):
            if s + f + sk + uf <= total:
                result.append(c(total, s=s, f=f, sk=sk, uf=uf))
    return result


@pytest.mark.parametrize("rule", list(TriggerRule), ids=[r.value for r in TriggerRule])
def test_matches_airflow_for_every_count(rule: TriggerRule) -> None:
    mismatches = [
        (n, evaluate(rule, n), airflow_verdict(rule, n))
        for n in all_counts(4)
        if evaluate(rule, n) is not airflow_verdict(rule, n)
    ]
    assert mismatches == []


def test_oracle_agrees_with_table() -> None:
    """The restatement above says what the hand-written table says (guards the oracle itself)."""
    assert [airflow_verdict(rule, n) for rule, n, _, _ in CASES] == [v for _, _, v, _ in CASES]


@pytest.mark.parametrize("rule", list(TriggerRule), ids=[r.value for r in TriggerRule])
def test_decided_verdict_never_returns_to_wait(rule: TriggerRule) -> None:
    """Once a task may run or is settled, more upstreams finishing never make it wait again."""
    states = ("success", "failed", "skipped", "upstream_failed")
    for n in all_counts(3):
        if n.done == n.total or evaluate(rule, n) is WAIT:
            continue
        for state in states:
            more = UpstreamCounts(
                total=n.total, **{k: getattr(n, k) + (k == state) for k in states}
            )
            assert evaluate(rule, more) is not WAIT, (n, state)


@pytest.mark.parametrize(
    ("verdict", "state"),
    [
        pytest.param(WAIT, None, id="wait"),
        pytest.param(RUN, None, id="run"),
        pytest.param(SKIP, TaskState.SKIPPED, id="skip"),
        pytest.param(UF, TaskState.UPSTREAM_FAILED, id="upstream_failed"),
    ],
)
def test_settles_as(verdict: Verdict, state: TaskState | None) -> None:
    assert verdict.settles_as == state


@pytest.mark.parametrize(
    ("counts", "done", "failures"),
    [
        pytest.param(c(4), 0, 0, id="none"),
        pytest.param(c(4, s=1, f=1, sk=1, uf=1), 4, 2, id="one-each"),
        pytest.param(c(5, s=2, sk=1), 3, 0, id="no-failures"),
        pytest.param(c(5, f=2, uf=3), 5, 5, id="all-failures"),
    ],
)
def test_upstream_counts_properties(counts: UpstreamCounts, done: int, failures: int) -> None:
    assert (counts.done, counts.failures) == (done, failures)
