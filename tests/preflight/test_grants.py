from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from preflight.canonical import canonical_json
from preflight.errors import GrantError
from preflight.grants import GrantClaims, GrantExpectation, GrantSigner, read_claims, verify_grant

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
TTL = 300

EXPECT = GrantExpectation(
    execution_id="ex_1",
    principal="user:alice",
    server="bank",
    tool="transfer",
    contract_digest="sha256:" + "c" * 64,
    payload_digest="sha256:" + "p" * 64,
)


def _issue(signer: GrantSigner, **overrides: object) -> tuple[str, GrantClaims]:
    args: dict[str, object] = {f.name: getattr(EXPECT, f.name) for f in fields(GrantExpectation)}
    args |= {
        "record_digest": "sha256:" + "r" * 64,
        "checklist_version": "cl-3",
        "now": NOW,
        "ttl_s": TTL,
    }
    args |= overrides
    return signer.issue(**args)  # type: ignore[arg-type]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _forge(claims: dict[str, object], key: Ed25519PrivateKey) -> str:
    """A token built by hand, the way an attacker with some private key would build one."""
    signing_input = "pfg1." + _b64(canonical_json(claims))
    return signing_input + "." + _b64(key.sign(signing_input.encode()))


def _claims_dict(token: str) -> dict[str, object]:
    data = json.loads(_unb64(token.split(".")[1]))
    assert isinstance(data, dict)
    return data


def _reason(token: str, keys: dict[str, Ed25519PublicKey], *, now: datetime = NOW) -> GrantError:
    with pytest.raises(GrantError) as caught:
        verify_grant(token, keys=keys, expect=EXPECT, now=now)
    return caught.value


@pytest.fixture
def private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def signer(private_key: Ed25519PrivateKey) -> GrantSigner:
    return GrantSigner(private_key)


@pytest.fixture
def keys(signer: GrantSigner) -> dict[str, Ed25519PublicKey]:
    return {signer.key_id: signer.public_key()}


def test_an_issued_grant_round_trips_through_verification(
    signer: GrantSigner, keys: dict[str, Ed25519PublicKey]
) -> None:
    token, claims = _issue(signer, nonce="n-1")
    assert token.startswith("pfg1.") and token.count(".") == 2 and "=" not in token
    assert claims.issued_at == int(NOW.timestamp())
    assert claims.expires_at == claims.issued_at + TTL
    assert claims.key_id == signer.key_id and claims.nonce == "n-1"
    assert verify_grant(token, keys=keys, expect=EXPECT, now=NOW) == claims
    assert read_claims(token) == claims


def test_each_grant_gets_a_fresh_nonce_by_default(signer: GrantSigner) -> None:
    (_, first), (_, second) = _issue(signer), _issue(signer)
    assert first.nonce != second.nonce and len(first.nonce) >= 24


def test_the_key_id_is_derived_from_the_public_key_and_survives_pem(signer: GrantSigner) -> None:
    assert signer.key_id.startswith("ed25519:") and len(signer.key_id) == len("ed25519:") + 16
    reloaded = GrantSigner.from_pem(signer.to_pem())
    assert reloaded.key_id == signer.key_id
    assert GrantSigner.generate().key_id != signer.key_id
    token, claims = _issue(reloaded)
    assert verify_grant(token, keys={signer.key_id: signer.public_key()}, expect=EXPECT, now=NOW) == claims


def test_the_signer_repr_does_not_show_the_private_key(signer: GrantSigner) -> None:
    assert repr(signer) == f"GrantSigner(key_id={signer.key_id!r})"


def test_a_tampered_payload_digest_in_the_token_is_a_bad_signature(
    signer: GrantSigner, keys: dict[str, Ed25519PublicKey]
) -> None:
    token, _ = _issue(signer)
    claims = _claims_dict(token) | {"payload_digest": "sha256:" + "e" * 64}
    prefix, _, signature = token.split(".")
    tampered = f"{prefix}.{_b64(canonical_json(claims))}.{signature}"
    assert read_claims(tampered).payload_digest == "sha256:" + "e" * 64  # well-formed, just not signed
    assert _reason(tampered, keys).reason == "bad_signature"


def test_a_changed_signature_byte_is_a_bad_signature(
    signer: GrantSigner, keys: dict[str, Ed25519PublicKey]
) -> None:
    token, _ = _issue(signer)
    prefix, body, signature = token.split(".")
    raw = bytearray(_unb64(signature))
    raw[10] ^= 0x01
    assert _reason(f"{prefix}.{body}.{_b64(bytes(raw))}", keys).reason == "bad_signature"


def test_a_token_signed_by_another_key_under_its_own_key_id_is_an_unknown_key(
    keys: dict[str, Ed25519PublicKey],
) -> None:
    stranger = GrantSigner.generate()
    token, _ = _issue(stranger)
    error = _reason(token, keys)
    assert error.reason == "unknown_key" and stranger.key_id in error.detail


def test_a_token_signed_by_another_key_that_claims_our_key_id_is_a_bad_signature(
    signer: GrantSigner, keys: dict[str, Ed25519PublicKey]
) -> None:
    token, _ = _issue(signer)
    forged = _forge(_claims_dict(token), Ed25519PrivateKey.generate())
    assert read_claims(forged).key_id == signer.key_id
    assert _reason(forged, keys).reason == "bad_signature"


def test_an_expired_grant_is_expired_not_bad_signature(
    signer: GrantSigner, keys: dict[str, Ed25519PublicKey]
) -> None:
    token, claims = _issue(signer)
    last_valid = NOW + timedelta(seconds=TTL) - timedelta(microseconds=1)
    assert verify_grant(token, keys=keys, expect=EXPECT, now=last_valid) == claims
    error = _reason(token, keys, now=NOW + timedelta(seconds=TTL))
    assert error.reason == "expired" and error.field is None


def test_expiry_is_reported_before_a_mismatch(signer: GrantSigner, keys: dict[str, Ed25519PublicKey]) -> None:
    token, _ = _issue(signer, tool="delete_account")
    assert _reason(token, keys, now=NOW + timedelta(days=1)).reason == "expired"


def test_a_forged_token_is_a_bad_signature_even_when_also_expired(
    signer: GrantSigner, keys: dict[str, Ed25519PublicKey]
) -> None:
    token, _ = _issue(signer)
    forged = _forge(_claims_dict(token), Ed25519PrivateKey.generate())
    assert _reason(forged, keys, now=NOW + timedelta(days=1)).reason == "bad_signature"


@pytest.mark.parametrize("field", [f.name for f in fields(GrantExpectation)])
def test_each_expectation_field_mismatch_names_the_field(
    signer: GrantSigner, keys: dict[str, Ed25519PublicKey], field: str
) -> None:
    token, _ = _issue(signer)
    other = replace(EXPECT, **{field: getattr(EXPECT, field) + "-other"})
    with pytest.raises(GrantError) as caught:
        verify_grant(token, keys=keys, expect=other, now=NOW)
    assert caught.value.reason == "mismatch" and caught.value.field == field


def test_a_mismatch_names_the_first_differing_field_in_expectation_order(
    signer: GrantSigner, keys: dict[str, Ed25519PublicKey]
) -> None:
    token, _ = _issue(signer)
    other = replace(EXPECT, payload_digest="sha256:x", server="other", tool="other")
    with pytest.raises(GrantError) as caught:
        verify_grant(token, keys=keys, expect=other, now=NOW)
    assert caught.value.field == "server"


def _valid_parts(signer: GrantSigner) -> tuple[str, str, str]:
    prefix, body, signature = _issue(signer)[0].split(".")
    return prefix, body, signature


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda p, b, s: "", id="empty"),
        pytest.param(lambda p, b, s: f"{p}.{b}", id="two-parts"),
        pytest.param(lambda p, b, s: f"{p}.{b}.{s}.x", id="four-parts"),
        pytest.param(lambda p, b, s: f"pfg2.{b}.{s}", id="other-version"),
        pytest.param(lambda p, b, s: f"{p}.{b}=.{s}", id="padding"),
        pytest.param(lambda p, b, s: f"{p}.{b[:-1]}*.{s}", id="bad-base64-character"),
        pytest.param(lambda p, b, s: f"{p}.{b[:-2]}.{s}", id="truncated-claims"),
        pytest.param(lambda p, b, s: f"{p}.{b}.{s}é", id="non-ascii-signature"),
        pytest.param(lambda p, b, s: f"{p}.{_b64(b'not json')}.{s}", id="not-json"),
        pytest.param(lambda p, b, s: f"{p}.{_b64(b'[1]')}.{s}", id="not-an-object"),
        pytest.param(lambda p, b, s: f"{p}.{_b64(b'\xff')}.{s}", id="not-utf8"),
    ],
)
def test_a_token_of_the_wrong_shape_is_malformed(
    signer: GrantSigner, keys: dict[str, Ed25519PublicKey], mangle: Callable[[str, str, str], str]
) -> None:
    token = mangle(*_valid_parts(signer))
    with pytest.raises(GrantError) as caught:
        read_claims(token)
    assert caught.value.reason == "malformed"
    assert _reason(token, keys).reason == "malformed"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda c: {k: v for k, v in c.items() if k != "nonce"}, id="missing-claim"),
        pytest.param(lambda c: c | {"scope": "all"}, id="extra-claim"),
        pytest.param(lambda c: c | {"expires_at": str(c["expires_at"])}, id="string-timestamp"),
        pytest.param(lambda c: c | {"expires_at": True}, id="bool-timestamp"),
        pytest.param(lambda c: c | {"expires_at": 1.5}, id="fractional-timestamp"),
        pytest.param(lambda c: c | {"tool": 7}, id="number-for-string"),
        pytest.param(lambda c: c | {"tool": None}, id="null-for-string"),
    ],
)
def test_missing_extra_or_mistyped_claims_are_malformed_even_when_signed_by_our_key(
    signer: GrantSigner,
    private_key: Ed25519PrivateKey,
    keys: dict[str, Ed25519PublicKey],
    change: Callable[[dict[str, object]], dict[str, object]],
) -> None:
    token, _ = _issue(signer)
    forged = _forge(change(_claims_dict(token)), private_key)
    assert _reason(forged, keys).reason == "malformed"


def test_non_canonical_claims_json_is_malformed_even_when_signed_by_our_key(
    signer: GrantSigner, private_key: Ed25519PrivateKey, keys: dict[str, Ed25519PublicKey]
) -> None:
    token, _ = _issue(signer)
    spaced = json.dumps(_claims_dict(token), indent=1).encode()
    signing_input = "pfg1." + _b64(spaced)
    forged = signing_input + "." + _b64(private_key.sign(signing_input.encode()))
    assert _reason(forged, keys).reason == "malformed"


def test_duplicate_claims_are_malformed(signer: GrantSigner) -> None:
    token, _ = _issue(signer)
    prefix, body, signature = token.split(".")
    raw = _unb64(body)
    duplicated = raw[:-1] + b',"tool":"transfer"}'
    with pytest.raises(GrantError) as caught:
        read_claims(f"{prefix}.{_b64(duplicated)}.{signature}")
    assert caught.value.reason == "malformed" and "twice" in caught.value.detail


def test_issuing_needs_a_positive_ttl_and_an_aware_time(signer: GrantSigner) -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        _issue(signer, ttl_s=0)
    with pytest.raises(ValueError, match="timezone"):
        _issue(signer, now=datetime(2025, 6, 1, 12, 0, 0))


def test_claims_are_immutable(signer: GrantSigner) -> None:
    _, claims = _issue(signer)
    with pytest.raises(AttributeError):
        claims.expires_at = 2**40  # type: ignore[misc]


def test_signing_the_claims_of_an_issued_grant_again_gives_the_same_token(signer: GrantSigner) -> None:
    token, claims = _issue(signer)
    assert signer.sign(claims) == token


def test_signed_claims_verify_and_a_changed_claim_gives_another_token(
    signer: GrantSigner, keys: dict[str, Ed25519PublicKey]
) -> None:
    _, claims = _issue(signer)
    changed = replace(claims, nonce="other")
    token = signer.sign(changed)
    assert token != signer.sign(claims)
    assert verify_grant(token, keys=keys, expect=EXPECT, now=NOW) == changed


def test_claims_naming_another_key_are_not_signed(signer: GrantSigner) -> None:
    _, claims = _issue(GrantSigner.generate())
    with pytest.raises(ValueError, match="claims name key"):
        signer.sign(claims)


def test_a_grant_expires_no_later_than_the_evidence_it_rests_on(
    signer: GrantSigner, keys: dict[str, Ed25519PublicKey]
) -> None:
    token, claims = _issue(signer, not_after=NOW + timedelta(seconds=15.9))

    assert claims.expires_at == claims.issued_at + 15
    assert verify_grant(token, keys=keys, expect=EXPECT, now=NOW + timedelta(seconds=14)) == claims
    assert _reason(token, keys, now=NOW + timedelta(seconds=15)).reason == "expired"


def test_evidence_fresher_than_the_default_lifetime_leaves_the_lifetime_alone(signer: GrantSigner) -> None:
    _, claims = _issue(signer, not_after=NOW + timedelta(seconds=TTL * 10))

    assert claims.expires_at == claims.issued_at + TTL
