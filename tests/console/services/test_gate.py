"""The execution gate: only a grant issued for exactly this call runs it, once; everything else is a 409
and the tool never hears of it."""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from console_helpers import BOB, Agent, Downstream, make_agent, transfer_request, transfer_v2
from django.db import connections

from console import models, signing
from console.services.catalog import catalog_import
from preflight import GrantClaims, GrantSigner

pytestmark = pytest.mark.django_db(transaction=True)


def granted(agent: Agent, **request: Any) -> dict[str, Any]:
    record = agent.post("/api/v1/executions", transfer_request(**request)).json()
    assert record["verdict"] == "execute", record["reasons"]
    return record


def run(agent: Agent, record: dict[str, Any], grant: str) -> Any:
    return agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": grant})


def forged(record: dict[str, Any], signer: GrantSigner | None = None, **claims: Any) -> str:
    """A grant signed for this execution with some claim changed (by our key unless another is given)."""
    grant = models.Grant.objects.get(execution_id=record["id"], record__seq=record["seq"])
    signer = signer or signing.signer()
    issued_at = int(datetime.now(UTC).timestamp())
    fields = {
        **grant.claims,
        "issued_at": issued_at,
        "expires_at": issued_at + 300,
        "nonce": secrets.token_urlsafe(18),
        "key_id": signer.key_id,
        **claims,
    }
    return signer.sign(GrantClaims(**fields))


def assert_refused(response: Any, code: str, bank: Downstream) -> None:
    assert response.status_code == 409, response.json()
    assert response.json()["error"] == code, response.json()
    assert bank.calls == []


def test_an_expired_grant_is_refused_and_recorded_expired(
    agent: Agent, bank: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = granted(agent)
    late = datetime.now(UTC) + timedelta(seconds=301)
    monkeypatch.setattr("console.services.common._now", lambda: late)

    response = run(agent, record, record["grant"])

    assert_refused(response, "grant_expired", bank)
    assert list(models.Outcome.objects.values_list("status", flat=True)) == ["expired"]


def test_a_used_grant_is_refused_the_second_time(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)

    first = run(agent, record, record["grant"])
    second = run(agent, record, record["grant"])

    assert first.json()["outcome"] == "executed"
    assert second.status_code == 409
    assert second.json()["error"] == "grant_used"
    assert len(bank.calls) == 1


def test_a_payload_edited_after_the_verdict_is_refused(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)
    stored = models.PreflightRecord.objects.get(execution_id=record["id"], seq=record["seq"])
    tampered = {**stored.record, "payload": {**stored.record["payload"], "to_account": "DE00MALLORY"}}
    models.PreflightRecord.objects.filter(pk=stored.pk).update(record=tampered)

    assert_refused(run(agent, record, record["grant"]), "grant_mismatch", bank)


def test_a_grant_with_edited_claims_fails_its_signature(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)
    prefix, claims, signature = record["grant"].split(".")
    edited = claims[:-2] + ("AA" if claims[-2:] != "AA" else "BB")

    response = run(agent, record, f"{prefix}.{edited}.{signature}")

    assert response.status_code == 409
    assert response.json()["error"] in ("grant_bad_signature", "grant_malformed")
    assert bank.calls == []


def test_a_grant_for_another_principal_is_refused(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)

    assert_refused(run(agent, record, forged(record, principal="user:mallory")), "grant_mismatch", bank)


def test_a_grant_for_another_tool_is_refused(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)

    assert_refused(run(agent, record, forged(record, tool="wire")), "grant_mismatch", bank)


def test_a_grant_for_another_execution_is_refused(agent: Agent, bank: Downstream) -> None:
    mine = granted(agent)
    other = granted(agent, amount=130)

    assert_refused(run(agent, mine, other["grant"]), "grant_mismatch", bank)


def test_a_grant_for_another_contract_version_is_refused(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)
    old_grant = record["grant"]
    catalog_import(
        server="bank",
        tools=[transfer_v2()],
        annotations_trusted=True,
        connector={"kind": "python"},
        actor="test",
    )
    again = agent.post(f"/api/v1/executions/{record['id']}/answers", {"answers": {}}).json()
    assert again["verdict"] == "execute"
    assert again["contract_digest"] != record["contract_digest"]

    assert_refused(run(agent, record, old_grant), "grant_mismatch", bank)


def test_a_grant_naming_an_old_contract_digest_is_refused(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)

    token = forged(record, contract_digest="sha256:" + "0" * 64)

    assert_refused(run(agent, record, token), "grant_mismatch", bank)


def test_a_grant_signed_by_another_key_is_refused(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)

    assert_refused(
        run(agent, record, forged(record, signer=GrantSigner.generate())), "grant_unknown_key", bank
    )


def test_a_grant_superseded_by_a_later_preflight_is_refused(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)
    agent.post(f"/api/v1/executions/{record['id']}/answers", {"answers": {"arg:to_account": BOB}})

    assert_refused(run(agent, record, record["grant"]), "grant_superseded", bank)


def test_garbage_instead_of_a_grant_is_a_409(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)

    assert_refused(run(agent, record, "not-a-grant"), "grant_malformed", bank)


def test_every_refusal_is_recorded_as_an_outcome(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)
    run(agent, record, "not-a-grant")
    run(agent, record, forged(record, principal="user:mallory"))

    outcomes = list(models.Outcome.objects.filter(execution_id=record["id"]).values_list("status", "detail"))
    assert [s for s, _ in outcomes] == ["denied", "denied"]
    assert outcomes[1][1].startswith("grant_mismatch: mismatch: principal")


def test_an_answer_after_the_run_is_refused_so_no_second_grant_exists(agent: Agent, bank: Downstream) -> None:
    record = granted(agent)
    run(agent, record, record["grant"])

    response = agent.post(f"/api/v1/executions/{record['id']}/answers", {"answers": {}})

    assert response.status_code == 409
    assert response.json()["error"] == "already_ran"
    assert models.Grant.objects.filter(execution_id=record["id"]).count() == 1


def test_fifty_concurrent_runs_with_one_grant_reach_the_tool_exactly_once(bank: Downstream) -> None:
    agent = make_agent()
    record = granted(agent)
    barrier = threading.Barrier(50)
    statuses: list[int] = []
    lock = threading.Lock()

    def attempt() -> None:
        client = make_client(agent)
        try:
            barrier.wait()
            response = client.post(
                f"/api/v1/executions/{record['id']}/run", {"grant": record["grant"]}, format="json"
            )
            with lock:
                statuses.append(response.status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=attempt) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert Counter(statuses) == {200: 1, 409: 49}
    assert len(bank.calls) == 1
    assert models.Grant.objects.get(execution_id=record["id"]).used_at is not None
    assert Counter(models.Outcome.objects.values_list("status", flat=True)) == {"executed": 1, "denied": 49}


def make_client(agent: Agent) -> Any:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    return client


def test_stored_claims_give_back_the_issued_token() -> None:
    # The database keeps claims, not tokens; the token shown to the agent is re-derived.
    signer = GrantSigner.generate()
    token, claims = signer.issue(
        execution_id="e",
        principal="user:alice",
        server="bank",
        tool="transfer",
        contract_digest="c",
        payload_digest="p",
        record_digest="r",
        checklist_version="v",
        now=datetime.now(UTC),
        ttl_s=60,
    )
    signing._signers[signing.Path("/nonexistent/key.pem")] = signer
    from django.test import override_settings

    with override_settings(PREFLIGHT_SIGNING_KEY_PATH=signing.Path("/nonexistent/key.pem")):
        assert signing.token_for(GrantClaims(**asdict(claims))) == token


@pytest.mark.parametrize(
    "answer",
    [{"note": "a\x00b"}, {"k\x00": 1}, {"n": 10**30}],
    ids=["nul", "nul-key", "huge-int"],
)
def test_a_tool_answer_postgres_cannot_hold_still_records_that_the_call_ran(
    bank: Downstream, agent: Agent, answer: dict[str, Any]
) -> None:
    from console import connectors

    def transfer(**arguments: Any) -> dict[str, Any]:
        bank.calls.append(arguments)
        return answer

    connectors.register_tool("bank", "transfer")(transfer)
    record = granted(agent)

    response = run(agent, record, record["grant"])

    assert response.status_code == 200, response.content
    assert response.json()["outcome"] == "executed"
    assert "unrepresentable" in response.json()["result"]
    assert len(bank.calls) == 1
    outcome = models.Outcome.objects.get(execution_id=record["id"])
    assert outcome.status == "executed"
    assert models.AuditEvent.objects.filter(kind="outcome", execution_id=record["id"]).exists()


@pytest.mark.parametrize("failure", ["refused", "raised"])
def test_a_tool_error_quoting_a_nul_still_records_the_outcome(
    bank: Downstream, agent: Agent, failure: str
) -> None:
    from console import connectors

    def transfer(**arguments: Any) -> dict[str, Any]:
        bank.calls.append(arguments)
        if failure == "refused":
            raise connectors.ToolCallFailed("account \x00frozen \ud800")
        raise RuntimeError("broke \x00 half-way")

    connectors.register_tool("bank", "transfer")(transfer)
    record = granted(agent)

    response = run(agent, record, record["grant"])

    assert response.status_code == 200, response.content
    expected = "failed" if failure == "refused" else "outcome_unknown"
    assert response.json()["outcome"] == expected
    outcome = models.Outcome.objects.get(execution_id=record["id"])
    assert outcome.status == expected and "\\u0000" in outcome.detail
