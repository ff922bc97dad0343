"""Sluice: Airflow-style workflows on Kubernetes, scheduled by highly available replicas."""

__version__ = "0.1.0"
