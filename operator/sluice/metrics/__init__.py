"""What a replica tells the outside: Prometheus metrics and the probes' answers.

`families` defines every metric (nothing of Sluice's imported, so any layer may
record into it); `health` decides readiness and liveness from the loop's last
tick (pure); `sampler` reads the database-wide numbers every few seconds; and
`server` serves `/metrics`, `/readyz` and `/healthz` (ADR 0020).
"""
