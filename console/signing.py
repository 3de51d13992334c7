"""The grant signing key: read from PREFLIGHT_SIGNING_KEY_PATH, generated there (mode 0600) on first use."""

from __future__ import annotations

import os
import threading
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
    """The token of stored claims; the database never holds a usable token. Claims signed with an older key
    raise ValueError."""
    return signer().sign(claims)
