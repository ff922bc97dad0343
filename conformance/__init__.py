"""A differential conformance suite: the same DAGs on Sluice and on a real Airflow (issue 16).

Each case (`cases/<area>/<name>.yaml`) is a Sluice manifest; `airflow_dags`
generates the Airflow DAG that means the same, `airflow_observer` records what
Airflow decides for it (`make conformance-refresh`, into `expected/`), and
`check` compares what Sluice decides against that record (`make conformance`).
See conformance/README.md and ADR 0022.
"""
