"""Grants: Ed25519-signed, short-lived, single-use authorizations to run one exact tool call.

Token: ``pfg1.<b64url(canonical_json(claims))>.<b64url(signature)>``, base64url without padding. The
signature covers the ASCII text ``pfg1.<claims part>``, so the version tag is bound too and the token
string, not merely its decoded bytes, is what was signed.

Single use is not enforced here: the nonce has to be consumed atomically with the decision to run
(a row in the database, marked used in the same transaction), and only the server can do that. A grant
that passes `verify_grant` twice is still a grant that may be used once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from preflight.canonical import canonical_json
from preflight.errors import GrantError

__all__ = ["GrantClaims", "GrantExpectation", "GrantSigner", "read_claims", "verify_grant"]

_PREFIX: Final = "pfg1"


@dataclass(frozen=True, slots=True)
class GrantClaims:
    execution_id: str
    principal: str
    server: str
    tool: str
    contract_digest: str
    payload_digest: str
    record_digest: str
    checklist_version: str
    issued_at: int  # unix seconds
    expires_at: int  # unix seconds
    nonce: str
    key_id: str


@dataclass(frozen=True, slots=True)
class GrantExpectation:
    """What the gate knows independently of the token. Field order is the order mismatches are reported."""

    execution_id: str
    principal: str
    server: str
    tool: str
    contract_digest: str
    payload_digest: str


_CLAIM_TYPES: Final[dict[str, type]] = {
    f.name: int if f.name in ("issued_at", "expires_at") else str for f in fields(GrantClaims)
}


def _unix(moment: datetime) -> float:
    # A naive datetime would be read as the host's local time and shift expiry by hours.
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("grant times must be timezone-aware")
    return moment.timestamp()


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str, part: str) -> bytes:
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise GrantError("malformed", detail=f"{part} is not base64url") from None
    # The decoder ignores stray characters and unused trailing bits; insisting on the one canonical
    # spelling keeps a token from having look-alike twins.
    if _b64encode(data) != text:
        raise GrantError("malformed", detail=f"{part} is not canonical unpadded base64url")
    return data


def _claims_bytes(claims: GrantClaims) -> bytes:
    return canonical_json({f.name: getattr(claims, f.name) for f in fields(GrantClaims)})


class GrantSigner:
    """Holds the Ed25519 private key that issues grants. Not a value: it deliberately has no equality
    and a repr that shows only the key id."""

    __slots__ = ("_key", "_key_id")

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        raw = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self._key_id = "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]

    @classmethod
    def generate(cls) -> GrantSigner:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, pem: bytes) -> GrantSigner:
        key = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise TypeError(f"grant signing key must be Ed25519, got {type(key).__name__}")
        return cls(key)

    def to_pem(self) -> bytes:
        # Unencrypted PKCS#8: protecting the file or secret that holds it is the deployment's job.
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    @property
    def key_id(self) -> str:
        return self._key_id

    def public_key(self) -> Ed25519PublicKey:
        return self._key.public_key()

    def __repr__(self) -> str:
        return f"GrantSigner(key_id={self._key_id!r})"

    def issue(
        self,
        *,
        execution_id: str,
        principal: str,
        server: str,
        tool: str,
        contract_digest: str,
        payload_digest: str,
        record_digest: str,
        checklist_version: str,
        now: datetime,
        ttl_s: int,
        nonce: str | None = None,
        not_after: datetime | None = None,
    ) -> tuple[str, GrantClaims]:
        """`not_after`: the grant expires no later than this, whatever `ttl_s` says (the first observation
        its record rests on goes stale then)."""
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s <= 0:
            raise ValueError(f"ttl_s must be a positive number of seconds, got {ttl_s!r}")
        issued_at = int(_unix(now))
        expires_at = issued_at + ttl_s
        if not_after is not None:
            # Rounded down: a grant may end a little early, never after its evidence.
            expires_at = min(expires_at, math.floor(_unix(not_after)))
        claims = GrantClaims(
            execution_id=execution_id,
            principal=principal,
            server=server,
            tool=tool,
            contract_digest=contract_digest,
            payload_digest=payload_digest,
            record_digest=record_digest,
            checklist_version=checklist_version,
            issued_at=issued_at,
            expires_at=expires_at,
            nonce=secrets.token_urlsafe(18) if nonce is None else nonce,
            key_id=self._key_id,
        )
        return self.sign(claims), claims

    def sign(self, claims: GrantClaims) -> str:
        """The token of claims made elsewhere (stored ones, or a test's forgery). Ed25519 is deterministic:
        signing the claims of an issued grant again gives the very token that was issued."""
        if claims.key_id != self._key_id:
            raise ValueError(f"claims name key {claims.key_id!r}, this signer holds {self._key_id!r}")
        signing_input = f"{_PREFIX}.{_b64encode(_claims_bytes(claims))}"
        signature = self._key.sign(signing_input.encode("ascii"))
        return f"{signing_input}.{_b64encode(signature)}"


def _split(token: str) -> tuple[str, str, str]:
    if not isinstance(token, str):
        raise GrantError("malformed", detail="token is not a string")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != _PREFIX:
        raise GrantError("malformed", detail=f"expected {_PREFIX}.<claims>.<signature>")
    return parts[0], parts[1], parts[2]


def _reject_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise GrantError("malformed", detail=f"claim {key!r} appears twice")
        out[key] = value
    return out


def _parse_claims(part: str) -> GrantClaims:
    raw = _b64decode(part, "claims")
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise GrantError("malformed", detail="claims are not UTF-8 JSON") from None
    if not isinstance(data, dict):
        raise GrantError("malformed", detail="claims are not a JSON object")
    missing = sorted(_CLAIM_TYPES.keys() - data.keys())
    extra = sorted(data.keys() - _CLAIM_TYPES.keys())
    if missing or extra:
        raise GrantError("malformed", detail=f"missing claims {missing}, unexpected claims {extra}")
    for name, expected in _CLAIM_TYPES.items():
        value = data[name]
        # bool is an int in Python but never a valid timestamp.
        if isinstance(value, bool) or not isinstance(value, expected):
            raise GrantError("malformed", field=name, detail=f"must be {expected.__name__}")
    claims = GrantClaims(**data)
    # We only ever issue canonical bytes; anything else was not made by us.
    if _claims_bytes(claims) != raw:
        raise GrantError("malformed", detail="claims are not canonical JSON")
    return claims


def read_claims(token: str) -> GrantClaims:
    """Parse a token's claims WITHOUT checking anything that makes them trustworthy.

    For finding the stored grant (by execution id or nonce) before verification; never for deciding.
    """
    _, claims_part, signature_part = _split(token)
    claims = _parse_claims(claims_part)
    _b64decode(signature_part, "signature")
    return claims


def verify_grant(
    token: str, *, keys: Mapping[str, Ed25519PublicKey], expect: GrantExpectation, now: datetime
) -> GrantClaims:
    """Check a grant: shape, key, signature, expiry, then that it was issued for exactly this call.

    Raises GrantError with reason `malformed`, `unknown_key`, `bad_signature`, `expired` or `mismatch`
    (then `field` names the first differing field of `expect`). Does not consume the nonce.
    """
    prefix, claims_part, signature_part = _split(token)
    claims = _parse_claims(claims_part)
    signature = _b64decode(signature_part, "signature")

    public_key = keys.get(claims.key_id)
    if public_key is None:
        raise GrantError("unknown_key", detail=claims.key_id)
    try:
        public_key.verify(signature, f"{prefix}.{claims_part}".encode("ascii"))
    except InvalidSignature:
        raise GrantError("bad_signature") from None

    # Expiry before binding: an honest but late client should hear "expired", not a confusing mismatch.
    if _unix(now) >= claims.expires_at:
        raise GrantError("expired", detail=f"expired at {claims.expires_at}")

    for f in fields(GrantExpectation):
        if getattr(claims, f.name) != getattr(expect, f.name):
            raise GrantError("mismatch", field=f.name, detail="the grant was issued for another call")
    return claims
