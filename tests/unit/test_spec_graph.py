"""Graph algorithms: cycles, order, Airflow priority weights, reachability."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from sluice.spec import graph
from sluice.spec.models import DagSpec


def dag(*tasks: dict[str, Any], **defaults: Any) -> DagSpec:
    return DagSpec.model_validate(
        {"defaults": {"image": "busybox:1.36", **defaults}, "tasks": list(tasks)}
    )


def diamond(**defaults: Any) -> DagSpec:
    """a -> (b, c) -> d with weights 1, 2, 3, 4."""
    return dag(
        {"name": "a", "priorityWeight": 1},
        {"name": "b", "priorityWeight": 2, "dependsOn": ["a"]},
        {"name": "c", "priorityWeight": 3, "dependsOn": ["a"]},
        {"name": "d", "priorityWeight": 4, "dependsOn": ["b", "c"]},
        **defaults,
    )


@pytest.mark.parametrize(
    ("edges", "cycle"),
    [
        ({}, None),
        ({"a": ["b"], "b": ["c"], "c": []}, None),
        ({"a": ["b", "c"], "b": ["d"], "c": ["d"]}, None),
        ({"a": ["a"]}, ["a", "a"]),
        ({"a": ["b"], "b": ["a"]}, ["a", "b", "a"]),
        ({"b": ["c"], "a": ["b"], "c": ["a"]}, ["b", "c", "a", "b"]),
        ({"x": ["a"], "a": ["b"], "b": ["c"], "c": ["a"]}, ["a", "b", "c", "a"]),
        ({"a": ["leaf"], "b": ["b"]}, ["b", "b"]),
    ],
)
def test_find_cycle(edges: Mapping[str, Sequence[str]], cycle: list[str] | None) -> None:
    assert graph.find_cycle(edges) == cycle


def test_find_cycle_handles_long_chains_without_recursion() -> None:
    size = 20_000
    edges = {f"t{i}": [f"t{i + 1}"] for i in range(size)}
    assert graph.find_cycle(edges) is None
    edges[f"t{size}"] = ["t0"]
    cycle = graph.find_cycle(edges)
    assert cycle is not None
    assert cycle[0] == cycle[-1] == "t0"
    assert len(cycle) == size + 2


def test_topological_order_keeps_declaration_order_for_ties() -> None:
    spec = dag(
        {"name": "load", "dependsOn": ["extract"]},
        {"name": "report"},
        {"name": "extract"},
        {"name": "audit", "dependsOn": ["extract"]},
    )
    assert graph.topological_order(spec) == ["report", "extract", "load", "audit"]


def test_topological_order_of_diamond() -> None:
    assert graph.topological_order(diamond()) == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        # own weight plus every task after it, each counted once (d is reached twice from a)
        ("downstream", {"a": 10, "b": 6, "c": 7, "d": 4}),
        # own weight plus every task before it (a is reached twice from d)
        ("upstream", {"a": 1, "b": 3, "c": 4, "d": 10}),
        ("absolute", {"a": 1, "b": 2, "c": 3, "d": 4}),
    ],
)
def test_priority_weights_on_a_diamond(rule: str, expected: dict[str, int]) -> None:
    assert graph.priority_weights(diamond(weightRule=rule)) == expected


def test_priority_weight_rules_apply_per_task() -> None:
    spec = dag(
        {"name": "a", "priorityWeight": 1, "weightRule": "absolute"},
        {"name": "b", "priorityWeight": 2, "dependsOn": ["a"], "weightRule": "upstream"},
        {"name": "c", "priorityWeight": 3, "dependsOn": ["b"]},
    )
    assert graph.priority_weights(spec) == {"a": 1, "b": 3, "c": 3}


def test_priority_weights_are_clamped_to_32_bits() -> None:
    spec = dag(
        {"name": "a", "priorityWeight": 2**31 - 1},
        {"name": "b", "priorityWeight": 2**31 - 1, "dependsOn": ["a"]},
        {"name": "c", "priorityWeight": -(2**31), "weightRule": "upstream"},
        {"name": "d", "priorityWeight": -(2**31), "dependsOn": ["c"], "weightRule": "upstream"},
    )
    weights = graph.priority_weights(spec)
    assert weights["a"] == graph.MAX_PRIORITY
    assert weights["d"] == graph.MIN_PRIORITY


def test_descendants_and_ancestors() -> None:
    spec = diamond()
    assert graph.descendants(spec, "a") == {"b", "c", "d"}
    assert graph.descendants(spec, "b") == {"d"}
    assert graph.descendants(spec, "d") == set()
    assert graph.ancestors(spec, "d") == {"a", "b", "c"}
    assert graph.ancestors(spec, "a") == set()


def test_direct_neighbours_and_lookup() -> None:
    spec = diamond()
    assert spec.upstream("d") == ("b", "c")
    assert spec.downstream("a") == ("b", "c")
    assert spec.downstream("d") == ()
    assert spec.task("c").priority_weight == 3
    with pytest.raises(KeyError, match="no task 'zz'"):
        spec.task("zz")
    with pytest.raises(KeyError):
        spec.downstream("zz")


def test_dependency_issues_tolerate_unparsed_entries() -> None:
    issues = graph.dependency_issues([(None, ["a"]), ("a", [None, "zz"]), ("a", [])])
    assert [(i.path, i.message) for i in issues] == [
        ("tasks[2].name", "name 'a' is not unique (also tasks[1]); rename one of them"),
        ("tasks[1].dependsOn[1]", "dependency 'zz' not defined; tasks are: a"),
    ]


def test_every_independent_cycle_is_reported() -> None:
    issues = graph.dependency_issues(
        [("a", ["b"]), ("b", ["a"]), ("c", ["d"]), ("d", ["c"]), ("e", [])]
    )
    assert [i.message.split(";")[0] for i in issues] == [
        "dependency cycle detected: a -> b -> a",
        "dependency cycle detected: c -> d -> c",
    ]
