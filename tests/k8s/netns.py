"""The local cluster's network namespace, seen from a test process.

The local cluster (hack/cluster-up.sh) lives in a network namespace of its own
(`$SLUICE_NETNS`, default `sluice`); its API server answers only there.
`e2e/run.sh` starts pytest inside it (hack/in-cluster.sh). A pytest started
anywhere else enters it here, before it talks to the cluster: `setns(2)` on
the main thread, which is where tests run and from which every kubectl,
scheduler replica and operator they start is forked, so those inherit it.
Postgres is reached over a Unix socket, which works from any namespace.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

NETNS = os.environ.get("SLUICE_NETNS", "sluice")
NETNS_PATH = Path("/run/netns") / NETNS
_CLONE_NEWNET = 0x40000000


def _inode(path: Path | str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def exists() -> bool:
    return NETNS_PATH.exists()


def inside() -> bool:
    """Is this thread in the cluster's network namespace?"""
    own = _inode(f"/proc/self/task/{threading.get_native_id()}/ns/net")
    return own is not None and own == _inode(NETNS_PATH)


def host_netns_path() -> Path:
    """The machine's own network namespace: that of this process's nearest ancestor
    outside the cluster's (the shell that ran e2e/run.sh, or pytest's parent)."""
    cluster = _inode(NETNS_PATH)
    pid = os.getpid()
    while pid > 1:
        path = Path(f"/proc/{pid}/ns/net")
        if _inode(path) != cluster:
            return path
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no ancestor of this process is outside the cluster's network namespace")


def enter() -> None:
    """Move this (the main) thread into the cluster's network namespace."""
    if inside():
        return
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("enter the cluster's network namespace from the main thread")
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fd = os.open(NETNS_PATH, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({NETNS_PATH}): {os.strerror(err)}")
    finally:
        os.close(fd)
    os.environ["SLUICE_IN_CLUSTER_NETNS"] = NETNS
