"""DAG manifests shared by the CLI tests: one valid, one with two independent problems."""

GOOD = """\
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata: {name: good}
spec:
  schedule: "@hourly"
  startDate: 2026-12-01T00:00:00Z
  defaults: {image: busybox:1.36, command: [sh, -c]}
  tasks:
    - {name: a, args: [echo a]}
    - {name: b, args: [echo b], dependsOn: [a]}
"""

BAD = """\
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata: {name: bad}
spec:
  defaults: {image: busybox:1.36}
  tasks:
    - {name: a, dependsOn: [z]}
    - {name: b, retries: -1}
"""
