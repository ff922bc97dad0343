"""Per-try tokens: what lets a task pod heartbeat for its own try and nothing else.

Task pods never get database credentials (invariant 9). The executor issues
each try a short JWT (HS256) whose subject is that try, `ti:<id>:<try>`; the
task API accepts a heartbeat only for the try in the token, so a pod cannot
speak for another task instance, nor for an older or newer try of its own.

Keys rotate without a flag day: a `TrySigner` signs with its first key and
verifies with any key it holds, picked by the token's `kid` header (a short
hash of the key). Rotation adds the new key, then makes it the first, then,
once every token signed with the old key has expired, drops the old one
(docs/architecture.md, "The task API").

A token's expiry must never kill a healthy long task: when a heartbeat is
accepted with a token below `REFRESH_BELOW` of its life, the response carries a
fresh one (`protocol.REFRESH_HEADER`) with the same lifetime, and the sidecar adopts it.
The old token stays valid until it expires, so a lost response costs nothing
but a retry at the next heartbeat.

Time checks use the signer's clock (injected in tests), not PyJWT's: PyJWT
checks signature, algorithm, audience and the presence of claims.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

AUDIENCE = "sluice-task-api"
ALGORITHM = "HS256"
LEEWAY_SECONDS = 10.0
# Below this fraction of its life left, an accepted heartbeat returns a fresh token.
REFRESH_BELOW = 0.2
MIN_KEY_BYTES = 32
KEYS_ENV = "SLUICE_TASK_API_KEYS"
KEYS_FILE_ENV = "SLUICE_TASK_API_KEYS_FILE"
_REQUIRED = ["sub", "ti", "try", "iat", "exp", "aud"]
_HOW_TO_GENERATE = "generate one with `openssl rand -base64 48`"


class KeysError(ValueError):
    """The task API's keys are missing or unusable; the message names the setting."""


class TokenRejected(Exception):
    """A heartbeat's token does not admit it: 401 (no valid token) or 403 (another try's)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Claims:
    """What a verified token says."""

    ti_id: int
    try_number: int
    issued_at: int
    expires_at: int
    key_id: str

    @property
    def lifetime(self) -> int:
        return self.expires_at - self.issued_at


def key_id(key: bytes) -> str:
    """A short, stable name for a key (the `kid` header); it does not reveal the key."""
    return hashlib.sha256(b"sluice-task-api-kid:" + key).hexdigest()[:12]


def subject(ti_id: int, try_number: int) -> str:
    return f"ti:{ti_id}:{try_number}"


class TrySigner:
    """Issues and verifies per-try tokens: signs with `keys[0]`, verifies with any of `keys`."""

    def __init__(
        self,
        keys: Sequence[bytes],
        *,
        clock: Callable[[], float] = time.time,
        leeway: float = LEEWAY_SECONDS,
        refresh_below: float = REFRESH_BELOW,
    ) -> None:
        if not keys:
            raise KeysError(f"no task API keys: set {KEYS_ENV} or {KEYS_FILE_ENV}")
        for index, key in enumerate(keys, start=1):
            if len(key) < MIN_KEY_BYTES:
                raise KeysError(
                    f"task API key {index} is {len(key)} bytes; keys must be at least "
                    f"{MIN_KEY_BYTES} bytes: {_HOW_TO_GENERATE}"
                )
        self._signing = bytes(keys[0])
        self._by_id = {key_id(k): bytes(k) for k in keys}
        self._clock = clock
        self._leeway = leeway
        self._refresh_below = refresh_below

    @property
    def signing_key_id(self) -> str:
        return key_id(self._signing)

    @property
    def key_ids(self) -> list[str]:
        return list(self._by_id)

    def issue(self, ti_id: int, try_number: int, ttl_seconds: float) -> str:
        """A token for one try, valid for `ttl_seconds` (whole seconds, rounded up)."""
        if ttl_seconds <= 0:
            raise ValueError(f"ttl_seconds must be positive (got {ttl_seconds})")
        now = int(self._clock())
        payload = {
            "sub": subject(ti_id, try_number),
            "ti": ti_id,
            "try": try_number,
            "iat": now,
            "exp": now + math.ceil(ttl_seconds),
            "aud": AUDIENCE,
        }
        return jwt.encode(
            payload, self._signing, algorithm=ALGORITHM, headers={"kid": self.signing_key_id}
        )

    def verify(self, token: str | None, ti_id: int, try_number: int) -> Claims:
        """The claims of `token` if it admits a heartbeat for (ti_id, try_number).

        Raises `TokenRejected`: 401 when there is no valid token at all (missing,
        malformed, forged, signed by an unknown key, expired, wrong audience),
        403 when a valid token names another try.
        """
        if not token:
            raise TokenRejected(401, "missing bearer token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenRejected(401, "malformed token") from None
        kid = header.get("kid")
        if not isinstance(kid, str) or kid not in self._by_id:
            raise TokenRejected(401, "token signed by a key this server does not hold")
        key = self._by_id[kid]
        try:
            payload: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                options={
                    "require": _REQUIRED,
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.InvalidSignatureError:
            raise TokenRejected(401, "bad signature") from None
        except jwt.InvalidAudienceError:
            raise TokenRejected(401, f"wrong audience (expected {AUDIENCE})") from None
        except jwt.PyJWTError as exc:
            raise TokenRejected(401, f"invalid token: {exc}") from None
        claims = _claims(payload, kid)
        now = self._clock()
        if claims.expires_at + self._leeway < now:
            raise TokenRejected(401, "token expired")
        if claims.issued_at - self._leeway > now:
            raise TokenRejected(401, "token issued in the future")
        if (claims.ti_id, claims.try_number) != (ti_id, try_number):
            raise TokenRejected(
                403,
                f"token is for {subject(claims.ti_id, claims.try_number)}, "
                f"not {subject(ti_id, try_number)}",
            )
        return claims

    def refreshed(self, claims: Claims) -> str | None:
        """A fresh token with the same lifetime if `claims` has less than the refresh
        fraction of its life left, else None."""
        remaining = claims.expires_at - self._clock()
        if remaining >= self._refresh_below * claims.lifetime:
            return None
        return self.issue(claims.ti_id, claims.try_number, max(claims.lifetime, 1))


def _claims(payload: Mapping[str, Any], kid: str) -> Claims:
    ti, try_number = payload["ti"], payload["try"]
    numbers = (ti, try_number, payload["iat"], payload["exp"])
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
        raise TokenRejected(401, "invalid token: ti, try, iat and exp must be integers")
    if payload["sub"] != subject(ti, try_number):
        raise TokenRejected(401, "invalid token: sub does not match ti and try")
    return Claims(ti, try_number, payload["iat"], payload["exp"], kid)


def load_keys(
    path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> list[bytes]:
    """The task API's keys, signing key first.

    From `path` if given, else the file named by $SLUICE_TASK_API_KEYS_FILE, else
    $SLUICE_TASK_API_KEYS. A file holds one key per line (blank lines ignored);
    the variable holds keys separated by commas or newlines. Each key is at least
    32 bytes of printable text, e.g. from `openssl rand -base64 48`.
    """
    env = os.environ if environ is None else environ
    source: str
    if path is None and env.get(KEYS_FILE_ENV):
        path = env[KEYS_FILE_ENV]
        source = f"{path} (${KEYS_FILE_ENV})"
    else:
        source = f"{path}"
    if path is not None:
        try:
            raw = Path(path).read_text()
        except OSError as exc:
            raise KeysError(
                f"cannot read the task API keys file {source}: {exc.strerror or exc}; "
                "mount the keys Secret there or point the setting at a readable file"
            ) from None
        items = raw.splitlines()
    elif env.get(KEYS_ENV):
        source = f"${KEYS_ENV}"
        items = re.split(r"[,\n]", env[KEYS_ENV])
    else:
        raise KeysError(
            f"no task API keys: set {KEYS_ENV} (keys separated by commas, signing key first) "
            f"or {KEYS_FILE_ENV} (a file with one key per line); {_HOW_TO_GENERATE}"
        )
    keys = [item.strip().encode() for item in items if item.strip()]
    if not keys:
        raise KeysError(f"{source} holds no task API key; {_HOW_TO_GENERATE}")
    for index, key in enumerate(keys, start=1):
        if len(key) < MIN_KEY_BYTES:
            raise KeysError(
                f"task API key {index} in {source} is {len(key)} bytes; keys must be at least "
                f"{MIN_KEY_BYTES} bytes: {_HOW_TO_GENERATE}"
            )
    return keys
