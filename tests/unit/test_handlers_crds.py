"""The CRD files are generated and current, and their schemas mirror the pydantic spec."""

from __future__ import annotations

from pathlib import Path

from sluice.handlers import crds
from sluice.spec.models import ManifestSpec, TaskSpec

CRDS = Path(__file__).resolve().parents[2] / "crds"


def _aliases(model: type[ManifestSpec] | type[TaskSpec]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def test_files_in_crds_are_current() -> None:
    for name, text in crds.rendered_files().items():
        path = CRDS / name
        assert path.is_file(), f"missing {path}; run python -m sluice.handlers.crds crds/"
        assert path.read_text() == text, (
            f"{path} is stale; run python -m sluice.handlers.crds crds/"
        )


def test_dag_schema_has_every_spec_and_task_field() -> None:
    schema = crds.definitions()["dags.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    assert set(spec["properties"]) == _aliases(ManifestSpec)
    task = spec["properties"]["tasks"]["items"]
    assert set(task["properties"]) == _aliases(TaskSpec)
    defaults = spec["properties"]["defaults"]["properties"]
    assert set(defaults) == _aliases(TaskSpec) - {"name", "dependsOn"}


def test_kinds_names_and_columns() -> None:
    found = {crd["spec"]["names"]["kind"]: crd["spec"] for crd in crds.definitions().values()}
    assert set(found) == {"DAG", "DagRun", "Pool", "Backfill", "TaskAction"}
    short = {kind: spec["names"].get("shortNames") for kind, spec in found.items()}
    assert short == {
        "DAG": ["dg"],
        "DagRun": ["dr"],
        "Pool": ["pl"],
        "Backfill": ["bf"],
        "TaskAction": None,
    }
    # A short name that is the singular (or plural) again adds nothing to kubectl.
    for spec in found.values():
        names = spec["names"]
        assert not set(names.get("shortNames") or []) & {names["singular"], names["plural"]}
    for spec in found.values():
        assert spec["group"] == "sluice.io"
        assert spec["names"]["categories"] == ["sluice"]
        version = spec["versions"][0]
        assert version["name"] == "v1alpha1"
        assert version["subresources"] == {"status": {}}
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        assert "observedGeneration" in status["conditions"]["items"]["properties"]

    def columns(kind: str) -> list[str]:
        return [c["name"] for c in found[kind]["versions"][0]["additionalPrinterColumns"]]

    assert columns("DagRun") == [
        "DAG",
        "Type",
        "Logical Date",
        "State",
        "Tasks",
        "Duration",
        "Reason",
        "Age",
        "Message",
    ]
    assert columns("DAG")[:6] == ["Schedule", "Paused", "Active", "Last Run", "Next Run", "Ready"]
    assert columns("Backfill")[:5] == ["DAG", "From", "To", "Progress", "State"]
    assert columns("Pool")[:4] == ["Slots", "Running", "Queued", "Open"]
    assert columns("TaskAction") == ["DAG", "Run", "Action", "Phase", "Changed", "Age"]


def test_a_task_action_is_done_once_so_its_spec_never_changes() -> None:
    spec = crds.definitions()["taskactions.yaml"]["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]["properties"]["spec"]
    assert spec["required"] == ["dagName", "runId", "action"]
    assert spec["properties"]["action"]["enum"] == ["clear", "markSuccess", "markFailed"]
    rules = {rule["rule"] for rule in spec["x-kubernetes-validations"]}
    assert "self == oldSelf" in rules


def test_every_printer_column_is_described_and_points_into_the_schema() -> None:
    """Each column has a description (kubectl explain, UIs) and reads a field the schema has,
    so a renamed status field cannot leave a column silently empty."""
    for crd in crds.definitions().values():
        version = crd["spec"]["versions"][0]
        schema = version["schema"]["openAPIV3Schema"]
        for column in version["additionalPrinterColumns"]:
            where = f"{crd['spec']['names']['kind']} column {column['name']}"
            assert column["description"].strip(), where
            path = column["jsonPath"].split("[", 1)[0].strip(".").split(".")
            if path[0] == "metadata":
                continue
            node = schema
            for part in path:
                assert part in node.get("properties", {}), f"{where}: no {part} in the schema"
                node = node["properties"][part]


def test_dagrun_reason_and_message_columns_read_the_status_the_publisher_writes() -> None:
    spec = crds.definitions()["dagruns.yaml"]["spec"]
    columns = {c["name"]: c for c in spec["versions"][0]["additionalPrinterColumns"]}
    assert columns["Reason"]["jsonPath"] == ".status.reason"
    assert "priority" not in columns["Reason"]
    # Messages run long: shown with -o wide.
    assert columns["Message"] == {
        "name": "Message",
        "type": "string",
        "jsonPath": ".status.message",
        "description": columns["Message"]["description"],
        "priority": 1,
    }
