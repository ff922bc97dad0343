"""Benchmarks: Sluice's scheduler against Airflow's on the same Postgres (issue 5)."""
