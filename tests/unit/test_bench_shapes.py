"""The benchmark's shapes are the graphs Airflow's performance DAGs build.

Each expectation below is read off the chain functions of Airflow's
`dev/perf/dags/elastic_dag.py` (apache/airflow), where `tasks[i]` is our `t{i}`
and `a.set_downstream(b)` (or `b.set_upstream(a)`) means b runs after a:

- `chain(*tasks)`: `tasks[i] >> tasks[i + 1]`, so t(i) waits on t(i-1).
- `chain_as_binary_tree`: for i >= 1, `tasks[i].set_downstream(tasks[(i - 1) // 2])`,
  so t((i-1)//2) waits on t(i): every task waits on its children 2i+1 and
  2i+2, and t0 is the last to run.
- `chain_as_star`: `tasks[0].set_upstream(list(tasks[1:]))`, so t0 waits on
  every other task, and those wait on nothing.
- `chain_as_grid`: `grid_size` is the least k with k(k+1)/2 >= n; cell (i, j)
  is `tasks[k*i - i*(i-1)/2 + j]` (rows of k, k-1, ... cells); for every cell
  with i + j <= k - 2, `tasks[index(i + 1, j)].set_downstream(tasks[index(i, j)])`
  and the same from (i, j + 1), each only when that index is below n. So a
  cell waits on the cell below it and the cell to its right, where they exist.
"""

from __future__ import annotations

import pytest
from bench.shapes import AIRFLOW_SHAPES, SHAPES, Workload, check


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("n", [1, 2, 3, 8, 10, 100])
def test_shapes_are_dags_with_n_tasks(shape: str, n: int) -> None:
    graph = SHAPES[shape](n)
    assert sorted(graph) == sorted(f"t{i}" for i in range(n))
    check(graph)


def test_the_default_shapes_are_airflows_five() -> None:
    assert AIRFLOW_SHAPES == ("no_structure", "linear", "binary_tree", "star", "grid")


def test_linear_is_airflows_chain() -> None:
    assert SHAPES["linear"](4) == {"t0": [], "t1": ["t0"], "t2": ["t1"], "t3": ["t2"]}


def test_binary_tree_fans_in_toward_t0() -> None:
    """`tasks[i].set_downstream(tasks[(i - 1) // 2])` for i = 1..6: t1, t2 -> t0; t3, t4 -> t1..."""
    assert SHAPES["binary_tree"](7) == {
        "t0": ["t1", "t2"],
        "t1": ["t3", "t4"],
        "t2": ["t5", "t6"],
        "t3": [],
        "t4": [],
        "t5": [],
        "t6": [],
    }
    # An odd parent left with one child when n is even.
    assert SHAPES["binary_tree"](6)["t2"] == ["t5"]
    # At 100 tasks: every task but t0 has exactly one downstream, its parent.
    graph = SHAPES["binary_tree"](100)
    downstream = {t: [d for d, ups in graph.items() if t in ups] for t in graph}
    assert downstream["t0"] == []
    assert all(downstream[f"t{i}"] == [f"t{(i - 1) // 2}"] for i in range(1, 100))


def test_star_fans_in_to_t0() -> None:
    """`tasks[0].set_upstream(list(tasks[1:]))`: t1..t(n-1) first, then t0."""
    assert SHAPES["star"](5) == {
        "t0": ["t1", "t2", "t3", "t4"],
        "t1": [],
        "t2": [],
        "t3": [],
        "t4": [],
    }
    graph = SHAPES["star"](100)
    assert len(graph["t0"]) == 99
    assert sum(1 for ups in graph.values() if not ups) == 99


def test_grid_is_numbered_by_rows_and_fans_in_toward_t0() -> None:
    """10 tasks: k = 4, rows t0-t3, t4-t6, t7-t8, t9; a cell waits on (i+1, j) and (i, j+1)."""
    assert SHAPES["grid"](10) == {
        "t0": ["t4", "t1"],
        "t1": ["t5", "t2"],
        "t2": ["t6", "t3"],
        "t3": [],
        "t4": ["t7", "t5"],
        "t5": ["t8", "t6"],
        "t6": [],
        "t7": ["t9", "t8"],
        "t8": [],
        "t9": [],
    }
    # 8 tasks: still k = 4, and the cells numbered 8 and 9 are left out with their edges.
    graph = SHAPES["grid"](8)
    assert graph["t5"] == ["t6"]
    assert graph["t7"] == []
    # 100 tasks: k = 14 (105 cells); the 5 left out are the last by rows, so row 11
    # keeps its first cell, t99, under t95.
    graph = SHAPES["grid"](100)
    assert graph["t95"] == ["t99", "t96"]
    assert graph["t99"] == []
    assert graph["t0"] == ["t14", "t1"]


def test_the_fan_outs_keep_the_old_shapes_under_their_own_names() -> None:
    assert SHAPES["fan_out_tree"](5) == {
        "t0": [], "t1": ["t0"], "t2": ["t0"], "t3": ["t1"], "t4": ["t1"]
    }  # fmt: skip
    assert SHAPES["fan_out_in"](4) == {"t0": [], "t1": ["t0"], "t2": ["t0"], "t3": ["t1", "t2"]}


def test_dag_ids_are_dns_labels_for_every_shape() -> None:
    for shape in SHAPES:
        for dag_id in Workload(shape, 2, 100).dag_ids():
            assert len(dag_id) <= 63
            assert dag_id.replace("-", "").isalnum()
