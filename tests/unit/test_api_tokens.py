"""Per-try tokens: who may heartbeat for which try, key rotation, refresh, key loading."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import jwt
import pytest

from sluice.api.tokens import (
    AUDIENCE,
    KEYS_ENV,
    KEYS_FILE_ENV,
    KeysError,
    TokenRejected,
    TrySigner,
    key_id,
    load_keys,
)

OLD = b"old-key-0123456789abcdef0123456789abcdef"
NEW = b"new-key-0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def rejected(
    signer: TrySigner, token: str | None, ti: int = 7, try_number: int = 2
) -> TokenRejected:
    with pytest.raises(TokenRejected) as caught:
        signer.verify(token, ti, try_number)
    return caught.value


def test_a_token_admits_its_own_try_and_names_it() -> None:
    clock = Clock()
    signer = TrySigner([NEW], clock=clock)
    token = signer.issue(7, 2, ttl_seconds=600)
    claims = signer.verify(token, 7, 2)
    assert (claims.ti_id, claims.try_number) == (7, 2)
    assert (claims.issued_at, claims.expires_at) == (int(T0), int(T0) + 600)
    assert jwt.get_unverified_header(token) == {"alg": "HS256", "typ": "JWT", "kid": key_id(NEW)}
    payload = jwt.decode(token, options={"verify_signature": False})
    assert payload == {
        "sub": "ti:7:2",
        "ti": 7,
        "try": 2,
        "iat": int(T0),
        "exp": int(T0) + 600,
        "aud": AUDIENCE,
    }


def test_another_try_or_task_instance_is_forbidden() -> None:
    signer = TrySigner([NEW])
    token = signer.issue(7, 2, ttl_seconds=600)
    for ti, try_number in ((7, 1), (7, 3), (8, 2)):
        refusal = rejected(signer, token, ti, try_number)
        assert refusal.status == 403
        assert "ti:7:2" in refusal.reason


def test_missing_or_malformed_tokens_are_unauthorized() -> None:
    signer = TrySigner([NEW])
    for token in (None, "", "not-a-jwt", "a.b.c"):
        assert rejected(signer, token).status == 401


def test_a_forged_signature_is_unauthorized() -> None:
    signer = TrySigner([NEW])
    # Signed with another key under this server's key id.
    forged = jwt.encode(
        {"sub": "ti:7:2", "ti": 7, "try": 2, "iat": int(T0), "exp": int(T0) + 600, "aud": AUDIENCE},
        b"attacker-key-0123456789abcdef0123456789",
        algorithm="HS256",
        headers={"kid": key_id(NEW)},
    )
    assert rejected(signer, forged).reason == "bad signature"
    # A real token whose payload was edited to name another try.
    header, payload, signature = signer.issue(7, 1, ttl_seconds=600).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims.update(sub="ti:7:2", **{"try": 2})
    edited = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert rejected(signer, f"{header}.{edited}.{signature}").status == 401


def test_unsigned_tokens_are_unauthorized() -> None:
    signer = TrySigner([NEW])
    unsigned = jwt.encode(
        {"sub": "ti:7:2", "ti": 7, "try": 2, "iat": int(T0), "exp": int(T0) + 600, "aud": AUDIENCE},
        None,
        algorithm="none",
        headers={"kid": key_id(NEW)},
    )
    assert rejected(signer, unsigned).status == 401


def test_an_expired_token_is_unauthorized_after_the_leeway() -> None:
    clock = Clock()
    signer = TrySigner([NEW], clock=clock)
    token = signer.issue(7, 2, ttl_seconds=60)
    clock.now = T0 + 60 + 9  # within the 10 s leeway
    signer.verify(token, 7, 2)
    clock.now = T0 + 60 + 11
    refusal = rejected(signer, token)
    assert (refusal.status, refusal.reason) == (401, "token expired")
    # Expired and for another try: no valid token at all, so 401, not 403.
    assert rejected(signer, token, 7, 3).status == 401


def test_a_token_from_the_future_is_unauthorized() -> None:
    clock = Clock(T0 + 3600)
    token = TrySigner([NEW], clock=clock).issue(7, 2, ttl_seconds=7200)
    assert rejected(TrySigner([NEW], clock=Clock(T0)), token).reason == "token issued in the future"


def _signed(claims: dict[str, object], key: bytes = NEW) -> str:
    return jwt.encode(claims, key, algorithm="HS256", headers={"kid": key_id(key)})


def test_wrong_audience_missing_claims_and_a_mismatched_subject_are_unauthorized() -> None:
    signer = TrySigner([NEW], clock=Clock())
    good = {"sub": "ti:7:2", "ti": 7, "try": 2, "iat": int(T0), "exp": int(T0) + 600}
    assert "wrong audience" in rejected(signer, _signed({**good, "aud": "another-api"})).reason
    assert rejected(signer, _signed(good)).status == 401  # no audience at all
    without_exp = {k: v for k, v in good.items() if k != "exp"}
    assert rejected(signer, _signed({**without_exp, "aud": AUDIENCE})).status == 401
    mismatched = {**good, "aud": AUDIENCE, "sub": "ti:7:1"}
    assert "sub does not match" in rejected(signer, _signed(mismatched)).reason
    stringly = {**good, "aud": AUDIENCE, "ti": "7"}
    assert rejected(signer, _signed(stringly)).status == 401


def test_rotation_old_tokens_verify_while_the_old_key_is_listed() -> None:
    clock = Clock()
    before = TrySigner([OLD], clock=clock)
    old_token = before.issue(7, 2, ttl_seconds=600)
    # Step 1: the new key is added second (verify only); step 2: it becomes the signing key.
    for keys in ([OLD, NEW], [NEW, OLD]):
        assert TrySigner(keys, clock=clock).verify(old_token, 7, 2).key_id == key_id(OLD)
    during = TrySigner([NEW, OLD], clock=clock)
    new_token = during.issue(7, 2, ttl_seconds=600)
    assert jwt.get_unverified_header(new_token)["kid"] == key_id(NEW)
    assert during.verify(new_token, 7, 2).key_id == key_id(NEW)
    # Step 3: the old key is dropped; tokens it signed are refused, new ones still verify.
    after = TrySigner([NEW], clock=clock)
    refusal = rejected(after, old_token)
    assert (refusal.status, refusal.reason) == (
        401,
        "token signed by a key this server does not hold",
    )
    after.verify(new_token, 7, 2)
    # A replica that never got the new key refuses what it signs (why step 1 comes first).
    assert rejected(before, new_token).status == 401


def test_a_token_near_its_end_is_refreshed_with_the_same_lifetime() -> None:
    clock = Clock()
    signer = TrySigner([NEW, OLD], clock=clock)
    token = signer.issue(7, 2, ttl_seconds=1000)
    claims = signer.verify(token, 7, 2)
    clock.now = T0 + 799  # 20.1 % left
    assert signer.refreshed(claims) is None
    clock.now = T0 + 801  # 19.9 % left
    fresh = signer.refreshed(claims)
    assert fresh is not None
    renewed = signer.verify(fresh, 7, 2)
    assert (renewed.issued_at, renewed.expires_at) == (int(T0) + 801, int(T0) + 1801)
    assert renewed.key_id == key_id(NEW)
    # Past its end but within the leeway it is still accepted, and refreshed.
    clock.now = T0 + 1005
    late = signer.refreshed(signer.verify(token, 7, 2))
    assert late is not None
    assert signer.verify(late, 7, 2).expires_at == int(T0) + 2005


def test_a_token_signed_by_the_old_key_is_refreshed_with_the_new_one() -> None:
    clock = Clock()
    token = TrySigner([OLD], clock=clock).issue(7, 2, ttl_seconds=100)
    clock.now = T0 + 90
    signer = TrySigner([NEW, OLD], clock=clock)
    fresh = signer.refreshed(signer.verify(token, 7, 2))
    assert fresh is not None
    assert TrySigner([NEW], clock=clock).verify(fresh, 7, 2).key_id == key_id(NEW)


def test_signer_refuses_no_keys_short_keys_and_non_positive_ttls() -> None:
    with pytest.raises(KeysError, match=KEYS_ENV):
        TrySigner([])
    with pytest.raises(KeysError, match="at least 32 bytes"):
        TrySigner([NEW, b"short"])
    with pytest.raises(ValueError, match="ttl_seconds"):
        TrySigner([NEW]).issue(7, 2, ttl_seconds=0)


def test_load_keys_from_a_file_signing_key_first(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"{NEW.decode()}\n\n  {OLD.decode()}  \n")
    assert load_keys(path, environ={}) == [NEW, OLD]
    assert load_keys(environ={KEYS_FILE_ENV: str(path), KEYS_ENV: "ignored"}) == [NEW, OLD]


def test_load_keys_from_the_environment() -> None:
    assert load_keys(environ={KEYS_ENV: f"{NEW.decode()}, {OLD.decode()}"}) == [NEW, OLD]
    assert load_keys(environ={KEYS_ENV: f"{NEW.decode()}\n{OLD.decode()}\n"}) == [NEW, OLD]


def test_load_keys_errors_name_the_setting_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(KeysError) as none:
        load_keys(environ={})
    assert KEYS_ENV in str(none.value)
    assert KEYS_FILE_ENV in str(none.value)
    assert "openssl rand" in str(none.value)
    with pytest.raises(KeysError) as short:
        load_keys(environ={KEYS_ENV: f"{NEW.decode()},too-short"})
    assert f"key 2 in ${KEYS_ENV} is 9 bytes" in str(short.value)
    assert "too-short" not in str(short.value)  # never print a key
    with pytest.raises(KeysError, match=f"{KEYS_FILE_ENV}.*No such file"):
        load_keys(environ={KEYS_FILE_ENV: str(tmp_path / "missing")})
    empty = tmp_path / "empty"
    empty.write_text("\n\n")
    with pytest.raises(KeysError, match="holds no task API key"):
        load_keys(empty, environ={})
