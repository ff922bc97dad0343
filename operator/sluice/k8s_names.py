"""DNS-safe Kubernetes object names: a readable part cut to fit, plus a hash of the identity.

Two things with different identities never share a name however long their
parts are, and two replicas naming the same thing make the same name, so the
second create is `AlreadyExists`, never a second object.
"""

from __future__ import annotations

import hashlib
import re

MAX_LABEL = 63
HASH_LENGTH = 10

_UNSAFE = re.compile(r"[^a-z0-9-]+")


def digest(*parts: str, length: int = HASH_LENGTH) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:length]


def slug(text: str) -> str:
    """Lower case, runs of anything but [a-z0-9] made one dash, no dash at either end."""
    return re.sub(r"-{2,}", "-", _UNSAFE.sub("-", text.lower())).strip("-")


def dns_label(readable: str, suffix: str, *, fallback: str) -> str:
    """`<readable cut>-<suffix>`, at most 63 characters (`suffix` is kept whole)."""
    tail = f"-{suffix}"
    head = slug(readable)[: MAX_LABEL - len(tail)].strip("-") or fallback
    return head + tail
