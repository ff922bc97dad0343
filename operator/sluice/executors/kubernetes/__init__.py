"""The Kubernetes Job executor: every task try is one `batch/v1` Job (ADR 0013).

- `names`: deterministic Job names and label values.
- `manifest`: a try's Job, from its launch and the executor's settings.
- `outcome`: what a Job and its pod say about a try (ended, pending, failed to start).
- `watch`: one namespace's watches (Jobs, pods, `FailedCreate` Events), into a cache.
- `namespaces`: one such cache per namespace a replica runs tries in (ADR 0032).
- `executor`: the `Executor` protocol on top of them.
"""

from sluice.executors.kubernetes.executor import KubernetesExecutor, KubernetesSettings

__all__ = ["KubernetesExecutor", "KubernetesSettings"]
