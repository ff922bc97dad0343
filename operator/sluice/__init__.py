"""Sluice: Airflow-style workflows on Kubernetes, scheduled by highly available replicas."""

from importlib import metadata

try:
    # One version, pyproject.toml's, read from the installed package's metadata.
    __version__ = metadata.version("sluice")
except metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"
