"""Task-log archives: each try's output, gzipped and capped, in an object store (ADR 0036).

`keys` names an archive, `compress` makes and reads one as a stream, `store` is
where they live (an S3-compatible bucket or a local directory). Nothing here
touches the database or Kubernetes: the archiving worker and `sluice logs` do.
"""
