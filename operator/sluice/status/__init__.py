"""Status flows out: DagRun objects published from the database (see publisher.py)."""
