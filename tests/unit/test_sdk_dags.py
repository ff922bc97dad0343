"""sluice.sdk dependencies and groups: `>>`, `<<`, lists, chains, groups and factories."""

from __future__ import annotations

from sluice.sdk import DAG, Task, TaskGroup


def upstream(dag: DAG) -> dict[str, list[str]]:
    return {t["name"]: t.get("dependsOn", []) for t in dag.manifest()["spec"]["tasks"]}


def make(name: str = "deps") -> DAG:
    return DAG(name, defaults={"image": "busybox"})


def test_rshift_and_lshift() -> None:
    dag = make()
    a, b, c = dag.task("a"), dag.task("b"), dag.task("c")
    a >> b
    c << b
    assert upstream(dag) == {"a": [], "b": ["a"], "c": ["b"]}


def test_chains_and_lists_on_either_side() -> None:
    dag = make()
    a, b, c, d, e = (dag.task(name) for name in "abcde")
    a >> [b, c] >> d
    [b, c] << e  # e runs before b and c
    assert upstream(dag) == {"a": [], "b": ["a", "e"], "c": ["a", "e"], "d": ["b", "c"], "e": []}


def test_operators_return_their_right_side() -> None:
    dag = make()
    a, b, c = dag.task("a"), dag.task("b"), dag.task("c")
    assert (a >> b) is b
    assert (a >> [b, c]) == [b, c]
    assert ([a, b] >> c) is c
    assert (c << a) is a
    assert ([b, c] << a) is a


def test_an_edge_written_twice_is_one_dependency() -> None:
    dag = make()
    a, b = dag.task("a"), dag.task("b")
    a >> b
    b << a
    assert upstream(dag)["b"] == ["a"]


def test_a_group_prefixes_names_shares_defaults_and_connects_by_its_ends() -> None:
    dag = make()
    start, end = dag.task("start"), dag.task("end", retries=1)
    load = dag.group("load", retries=3, priority_weight=5)
    one = load.task("one")
    two = load.task("two", retries=0)
    three = load.task("three")
    one >> [two, three]
    start >> load >> end
    assert upstream(dag) == {
        "start": [],
        "end": ["load-two", "load-three"],
        "load-one": ["start"],
        "load-two": ["load-one"],
        "load-three": ["load-one"],
    }
    tasks = {t["name"]: t for t in dag.manifest()["spec"]["tasks"]}
    assert tasks["load-one"] == {
        "name": "load-one",
        "dependsOn": ["start"],
        "retries": 3,
        "priorityWeight": 5,
    }
    assert tasks["load-two"]["retries"] == 0  # the task's own field wins
    assert (one.name, one.group, load.tasks()) == ("load-one", load, [one, two, three])


def test_a_group_connected_before_its_tasks_exist() -> None:
    # Edges are resolved when the manifest is made, not when `>>` is written.
    dag = make()
    start = dag.task("start")
    group = dag.group("g")
    start >> group
    first, second = group.task("a"), group.task("b")
    first >> second
    assert upstream(dag) == {"start": [], "g-a": ["start"], "g-b": ["g-a"]}


def test_nested_groups_and_group_to_group_edges() -> None:
    dag = make()
    outer = dag.group("outer", retries=2)
    left, right = outer.group("left"), outer.group("right", retries=4)
    l1, l2 = left.task("x"), left.task("y")
    r1 = right.task("x")
    l1 >> l2
    left >> right
    after = dag.task("after")
    outer >> after
    assert upstream(dag) == {
        "outer-left-x": [],
        "outer-left-y": ["outer-left-x"],
        "outer-right-x": ["outer-left-y"],
        "after": ["outer-right-x"],
    }
    retries = {t["name"]: t.get("retries") for t in dag.manifest()["spec"]["tasks"]}
    assert retries == {"outer-left-x": 2, "outer-left-y": 2, "outer-right-x": 4, "after": None}
    assert outer.tasks() == [l1, l2, r1]


def test_a_factory_function_for_a_repeated_shape() -> None:
    dag = make("factory")

    def extract_and_load(source: str) -> TaskGroup:
        group = dag.group(source)
        group.task("extract", args=[f"extract {source}"]) >> group.task("load")
        return group

    groups = [extract_and_load(source) for source in ("orders", "users")]
    report: Task = dag.task("report")
    groups >> report
    assert upstream(dag)["report"] == ["orders-load", "users-load"]
    assert upstream(dag)["users-load"] == ["users-extract"]


def test_tasks_keep_the_order_they_were_added() -> None:
    dag = make()
    names = ["z", "a", "m"]
    for name in names:
        dag.task(name)
    assert [t.name for t in dag.tasks] == names
    assert [t["name"] for t in dag.manifest()["spec"]["tasks"]] == names
