"""The web UI (issue 32, ADR 0039): server-rendered pages over the metadata database."""
