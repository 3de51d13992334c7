"""The grant signing key: read from PREFLIGHT_SIGNING_KEY_PATH, generated there (mode 0600) on first use."""

from __future__ import annotations

import os
import threading
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.conf import settings

from preflight import GrantClaims, GrantSigner

_lock = threading.Lock()
_signers: dict[Path, GrantSigner] = {}


def _load_or_create(path: Path) -> GrantSigner:
    try:
        return GrantSigner.from_pem(path.read_bytes())
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    signer = GrantSigner.generate()
    try:
        # O_EXCL: when two processes start at once, one creates the key and the other reads that one.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return GrantSigner.from_pem(path.read_bytes())
    with os.fdopen(fd, "wb") as f:
        f.write(signer.to_pem())
    return signer


def signer() -> GrantSigner:
    path = Path(settings.PREFLIGHT_SIGNING_KEY_PATH)
    found = _signers.get(path)
    if found is None:
        with _lock:
            found = _signers.get(path) or _load_or_create(path)
            _signers[path] = found
    return found


def verification_keys() -> dict[str, Ed25519PublicKey]:
    s = signer()
    return {s.key_id: s.public_key()}


def token_for(claims: GrantClaims) -> str:
    """The token of stored claims. Ed25519 signatures are deterministic, so re-signing the same claims
    gives the token that was issued; the database never holds a usable token."""
    fields = asdict(claims)
    token, again = signer().issue(
        execution_id=fields["execution_id"],
        principal=fields["principal"],
        server=fields["server"],
        tool=fields["tool"],
        contract_digest=fields["contract_digest"],
        payload_digest=fields["payload_digest"],
        record_digest=fields["record_digest"],
        checklist_version=fields["checklist_version"],
        now=datetime.fromtimestamp(claims.issued_at, UTC),
        ttl_s=claims.expires_at - claims.issued_at,
        nonce=claims.nonce,
    )
    if again != claims:
        raise ValueError("the stored claims were signed with another key")
    return token
