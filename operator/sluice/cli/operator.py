"""`sluice operator`: the kopf handlers; spec flows in from DAG, DagRun and Pool objects.

Run as many replicas as you like: they peer through kopf's peering object
(`--peering`, created here if missing; its CRDs are in crds/kopf-peering.yaml),
and only the replica with the highest priority handles events, the others
wait; when it stops, the next one resumes once its peering record is older
than `--peering-lifetime`. Each replica picks a random priority unless told
one: kopf pauses every replica that sees another of the same priority.

Every replica also runs the resync (`sluice.handlers.resync`): every
`RESYNC_INTERVAL` seconds it annotates the Sluice objects kopf never finished
handling, so an event lost between replicas is not lost for good.

Every watch is bounded (`--watch-server-timeout`, `--watch-client-timeout`): kopf's
default leaves both unset, and a watch whose connection dies without a close (a
load balancer's idle timeout, a restarted API server behind a VIP) then hangs
silently with no events and no error (kopf issue #585). With them the API server
ends each watch after the server timeout and kopf resumes it; a connection that
says nothing for the client timeout is dropped and opened again.

`--health-port` serves kopf's own liveness endpoint at
`http://0.0.0.0:PORT/healthz`: it answers while kopf's event loop runs (and
runs the `@kopf.on.probe` handlers, none yet), on every replica, serving or
waiting.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import random
import socket
from dataclasses import dataclass
from typing import Annotated, Any, cast

import typer

from sluice.cli.common import DatabaseUrl, LogJson, LogLevel
from sluice.cli.errors import fail
from sluice.config import DATABASE_URL_ENV
from sluice.handlers import resync
from sluice.logs import configure_logging, level_number

PEERING_GROUP = "kopf.dev"
PEERING_VERSION = "v1"
HEALTH_PATH = "/healthz"
# The resync's round, and how old an unhandled object must be before it is nudged (kopf
# handles a new object within a second or two; one waiting for a retry is nudged too).
RESYNC_INTERVAL = 30.0
RESYNC_GRACE = 30.0
# Watch timeouts (seconds): the API server ends a watch after WATCH_SERVER_TIMEOUT and kopf
# resumes it from its resourceVersion; the client gives up on a connection after
# WATCH_CLIENT_TIMEOUT, later than the server would end it, so only a dead one is cut.
# The server's is whole seconds: kopf sends str() of it as the watch's `timeoutSeconds`,
# which the API server parses as an integer (a float's "300.0" is refused with 400 Bad
# Request, and every watch fails).
WATCH_SERVER_TIMEOUT = 300
WATCH_CLIENT_TIMEOUT = 330.0
WATCH_CONNECT_TIMEOUT = 30.0


@dataclass(frozen=True)
class OperatorTuning:
    """The kopf settings `sluice operator` takes from its flags (applied at startup)."""

    peering_lifetime: int = 60
    watch_server_timeout: int = WATCH_SERVER_TIMEOUT
    watch_client_timeout: float = WATCH_CLIENT_TIMEOUT

    def problems(self) -> list[str]:
        found = []
        if self.peering_lifetime < 5:
            found.append(
                f"--peering-lifetime must be at least 5 seconds (got {self.peering_lifetime})"
            )
        if self.watch_server_timeout < 1:
            found.append(
                "--watch-server-timeout must be at least 1 second"
                f" (got {self.watch_server_timeout})"
            )
        if self.watch_client_timeout <= self.watch_server_timeout:
            found.append(
                f"--watch-client-timeout ({self.watch_client_timeout:g}) must be more than"
                f" --watch-server-timeout ({self.watch_server_timeout:g}): else the client cuts"
                " healthy watches before the server ends them"
            )
        return found

    def apply(self, settings: Any) -> None:
        """Set them on kopf's OperatorSettings."""
        settings.peering.lifetime = self.peering_lifetime
        settings.watching.server_timeout = self.watch_server_timeout
        settings.watching.client_timeout = self.watch_client_timeout
        settings.watching.connect_timeout = WATCH_CONNECT_TIMEOUT


def configure_operator_logging(level: str, *, json: bool) -> None:
    """kopf's records (and the handlers', standard logging) as kopf formats them, JSON when
    asked; the resync's structlog records the same way as the scheduler's."""
    import kopf

    kopf.configure(log_format=kopf.LogFormat.JSON if json else kopf.LogFormat.FULL)
    logging.getLogger().setLevel(level_number(level))
    configure_logging(level, json=json)


def liveness_endpoint(port: int | None) -> str | None:
    """kopf's `liveness_endpoint` for `--health-port` (None: no endpoint)."""
    return None if port is None else f"http://0.0.0.0:{port}{HEALTH_PATH}"


def operator(
    namespace: Annotated[
        list[str] | None, typer.Option("--namespace", "-n", help="watch these namespaces")
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="watch every namespace")
    ] = False,
    database_url: DatabaseUrl = None,
    peering: Annotated[
        str, typer.Option(help="the kopf peering object the replicas share")
    ] = "sluice",
    priority: Annotated[
        int | None,
        typer.Option(help="this replica's peering priority (default: random; highest serves)"),
    ] = None,
    peering_lifetime: Annotated[
        int, typer.Option(help="seconds after which a silent replica is taken for gone")
    ] = 60,
    standalone: Annotated[
        bool, typer.Option(help="no peering: this must be the only operator replica")
    ] = False,
    health_port: Annotated[
        int | None,
        typer.Option(
            help=f"serve kopf's liveness endpoint at http://0.0.0.0:PORT{HEALTH_PATH}"
            " (default: off)",
            min=1,
            max=65535,
        ),
    ] = None,
    watch_server_timeout: Annotated[
        int,
        typer.Option(
            help="whole seconds after which the API server ends each watch (kopf resumes it)"
        ),
    ] = WATCH_SERVER_TIMEOUT,
    watch_client_timeout: Annotated[
        float,
        typer.Option(
            help="seconds after which a watch connection is dropped and opened again;"
            " more than --watch-server-timeout (a watch without it can hang silently)"
        ),
    ] = WATCH_CLIENT_TIMEOUT,
    log_level: LogLevel = "info",
    log_json: LogJson = False,
) -> None:
    """Run the operator (any number of replicas; one handles events at a time)."""
    import kopf

    import sluice.handlers.operator  # noqa: F401  (registers the handlers)

    if database_url:
        os.environ[DATABASE_URL_ENV] = database_url
    tuning = OperatorTuning(peering_lifetime, watch_server_timeout, watch_client_timeout)
    problems = tuning.problems()
    if problems:
        fail("; ".join(problems))
    namespaces = namespace or []
    clusterwide = all_namespaces or not namespaces
    chosen = priority if priority is not None else random.randint(1, 2**31 - 1)
    if not standalone:
        ensure_peering(peering, [] if clusterwide else namespaces)

    # At info: handlers run, peering pauses and resumes.
    configure_operator_logging(log_level, json=log_json)

    @kopf.on.startup()
    def operator_settings(settings: kopf.OperatorSettings, **_: Any) -> None:
        tuning.apply(settings)

    @kopf.on.startup()
    async def start_resync(memo: kopf.Memo, **_: Any) -> None:
        # The safety net under kopf's events (sluice.handlers.resync).
        memo.resync = asyncio.create_task(
            resync.resync_forever(
                _custom_objects_api,
                None if clusterwide else namespaces,
                interval=RESYNC_INTERVAL,
                grace=RESYNC_GRACE,
            ),
            name="sluice-resync",
        )

    @kopf.on.cleanup()
    async def stop_resync(memo: kopf.Memo, **_: Any) -> None:
        task = getattr(memo, "resync", None)
        if task is not None:
            task.cancel()

    kopf.run(
        identity=cast(Any, peering_identity()),  # kopf's Identity: a NewType of str
        standalone=standalone,
        peering_name=None if standalone else peering,
        priority=chosen,
        clusterwide=clusterwide,
        namespaces=namespaces,
        liveness_endpoint=liveness_endpoint(health_port),
    )


def _custom_objects_api() -> Any:
    """A client for Sluice's and kopf's objects, from the kubeconfig or in-cluster config."""
    from kubernetes import client, config

    config.load_config()  # type: ignore[no-untyped-call]
    return client.CustomObjectsApi()


def peering_identity() -> str:
    """How this replica signs its peering entries: the pod's name (POD_ID, as kopf
    reads it) or user@host/pid. Not kopf's own guess: it asks the password
    database for the user, which has no entry for the image's uid 65532."""
    pod = os.environ.get("POD_ID")
    if pod:
        return pod
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no USER/LOGNAME
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}/{os.getpid()}"


def ensure_peering(name: str, namespaces: list[str]) -> None:
    """Create the peering object (cluster-wide, or one per namespace) if it is missing."""
    from kubernetes.client.exceptions import ApiException

    try:
        api = _custom_objects_api()
    except Exception as exc:
        fail(f"the operator cannot load a kubeconfig or in-cluster config: {exc}")
    body = {"apiVersion": f"{PEERING_GROUP}/{PEERING_VERSION}", "metadata": {"name": name}}
    calls: list[tuple[Any, tuple[str, ...], str]] = (
        [(api.create_cluster_custom_object, ("clusterkopfpeerings",), "ClusterKopfPeering")]
        if not namespaces
        else [
            (api.create_namespaced_custom_object, (ns, "kopfpeerings"), "KopfPeering")
            for ns in namespaces
        ]
    )
    for create, where, kind in calls:
        try:
            create(PEERING_GROUP, PEERING_VERSION, *where, {**body, "kind": kind})
        except ApiException as exc:
            if exc.status == 409:
                continue  # another replica made it
            if exc.status == 404:
                fail("kopf's peering CRDs are missing: kubectl apply -f crds/kopf-peering.yaml")
            fail(f"cannot create the peering object {kind} {name!r}: {exc.status} {exc.reason}")
