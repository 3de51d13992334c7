"""Output serializers for the record (the answer to every execution call). They document the shape for the
OpenAPI schema; the views send the engine's JSON as it was recorded, so fields added later are never dropped
on the way out and nothing is re-serialized per call."""

from __future__ import annotations

from rest_framework import serializers

from console.api.fields import AnyJSON, JSONObject
from preflight.record import ROUTES, SLOT_APPROVALS


class FindingOut(serializers.Serializer[JSONObject]):
    source = serializers.CharField()  # type: ignore[assignment]  # a declared field; stubs see Field.source
    outcome = serializers.ChoiceField(choices=["found", "no_result", "error"])
    pointer = serializers.DictField(required=False)
    detail = serializers.CharField(required=False)


class SlotOut(serializers.Serializer[JSONObject]):
    key = serializers.CharField(
        help_text=(
            "arg:<name>, cond:<id>, fixed:..., user:<rule>, approval:<id>, branch:..., confirm:<slot key>"
            " (the user's confirmation of that value), consent:call (the user's consent to the whole call)"
        )
    )
    kind = serializers.ChoiceField(choices=["value", "condition", "intent"])
    defined_by = serializers.ChoiceField(choices=["fixed", "provider", "policy", "user"])
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field; stubs see Field.label
    status = serializers.ChoiceField(choices=["known", "null", "unknown"])
    value = AnyJSON()
    source = serializers.CharField(allow_null=True)  # type: ignore[assignment]  # a declared field; stubs see Field.source
    pointer = serializers.DictField(allow_null=True)
    route = serializers.ChoiceField(choices=list(ROUTES), allow_null=True)
    labels = serializers.ListField(child=serializers.CharField())
    approval = serializers.ChoiceField(choices=list(SLOT_APPROVALS), allow_null=True)
    findings = FindingOut(many=True)
    gap = serializers.CharField(required=False)
    candidate = serializers.DictField(
        required=False,
        help_text="an unverified proposal `{value, verified: false}`: shown, never counted (kept also beside "
        "a value another source settled, and for a slot that does not take values from the conversation)",
    )
    refused = serializers.DictField(
        required=False,
        help_text="`{value, reason}`: a value found for the slot that the tool's schema refuses; it settles "
        "nothing. A user-answerable slot is asked again with the reason (route ask_user, gap user_gap); "
        "anything else holds",
    )
    detail = serializers.CharField(required=False)
    met = serializers.BooleanField(required=False)
    waits_for = serializers.ListField(child=serializers.CharField(), required=False)


class ProposedOut(serializers.Serializer[JSONObject]):
    value = AnyJSON()
    verified = serializers.BooleanField()


class QuestionOut(serializers.Serializer[JSONObject]):
    slot = serializers.CharField(help_text="the slot key to answer under in POST .../answers (`answers`)")
    kind = serializers.ChoiceField(
        choices=["value", "choice", "without", "confirmation", "consent"],
        help_text=(
            "value: say the value; choice: one of `options` (its label, or its index); without: the action"
            " has no setting for this undeclared argument, answer null to go ahead without it;"
            " confirmation: the requesting user's yes (true) or no (false) to the one value in `shows`;"
            " consent: the requesting user's yes or no to the whole call, the final payload in `shows` and"
            " in words in `text`. A confirmation or consent binds to `shows.digest`: a changed value or"
            " payload voids it, yes or no, and is asked again. A no blocks the call while it stands. Only"
            " the user's channel (the agent API) answers these; an approver cannot."
        ),
    )
    text = serializers.CharField()
    schema = serializers.DictField(
        help_text="JSON Schema an answer must satisfy before it counts (otherwise 422 `invalid_answer`); an "
        "optional argument's schema admits null, which leaves it out"
    )
    options = serializers.ListField(child=serializers.CharField(), required=False)
    shows = serializers.DictField(
        required=False,
        help_text=(
            'confirmation: {"slot", "value", "digest"}; consent: {"payload", "digest", "words"}. An answer'
            ' may be true/false or {"yes": <bool>, "digest": <this digest>}'
        ),
    )
    reason = serializers.CharField(
        required=False,
        help_text="why the value stated before cannot be used (what the tool's schema refuses)",
    )
    proposed = ProposedOut(
        required=False,
        help_text="what the conversation proposed for this slot, unverified: shown, not counted",
    )


class UnmetOut(serializers.Serializer[JSONObject]):
    id = serializers.CharField()
    on_false = serializers.ChoiceField(choices=["hold", "block"])
    text = serializers.CharField()


class GapOut(serializers.Serializer[JSONObject]):
    # "class" is a Python keyword; the field is renamed on the wire.
    class_ = serializers.ChoiceField(choices=["user_gap", "provider_gap", "source_gap", "implementation_gap"])
    slot = serializers.CharField()
    detail = serializers.CharField()

    def get_fields(self) -> dict[str, serializers.Field[object, object, object, object]]:
        fields = super().get_fields()
        fields["class"] = fields.pop("class_")
        return fields


class MeasureRequestOut(serializers.Serializer[JSONObject]):
    measure = serializers.CharField()
    lookup = serializers.CharField()
    args = serializers.DictField()
    key = serializers.CharField()


class RecordOut(serializers.Serializer[JSONObject]):
    id = serializers.UUIDField()
    seq = serializers.IntegerField(help_text="which preflight of this execution this is (1, 2, ...)")
    verdict = serializers.ChoiceField(choices=["execute", "ask", "measure", "hold", "block", "deferred"])
    server = serializers.CharField()
    tool = serializers.CharField()
    contract_digest = serializers.CharField()
    principal = serializers.CharField()
    checklist_version = serializers.CharField()
    slots = SlotOut(many=True)
    questions = QuestionOut(many=True)
    measures = MeasureRequestOut(many=True, help_text="lookups running now (verdict measure)")
    unmet = UnmetOut(many=True)
    gaps = GapOut(many=True)
    notices = serializers.ListField(child=serializers.CharField())
    payload = serializers.DictField(allow_null=True)
    payload_digest = serializers.CharField(allow_null=True)
    payload_valid = serializers.BooleanField(allow_null=True)
    payload_errors = serializers.ListField(child=serializers.CharField())
    unknown_count = serializers.IntegerField()
    reasons = serializers.ListField(child=serializers.CharField())
    evaluated_at = serializers.DateTimeField()
    timing_at = serializers.DateTimeField(allow_null=True)
    fresh_until = serializers.DateTimeField(
        allow_null=True,
        help_text="when the first observation this record rests on goes stale; its grant expires no later",
    )
    record_digest = serializers.CharField()
    grant = serializers.CharField(allow_null=True, help_text="a single-use grant token (verdict execute)")
    grant_expires_at = serializers.DateTimeField(allow_null=True)
    outcome = serializers.ChoiceField(choices=["executed", "failed", "outcome_unknown"], allow_null=True)
    lookups_unsent = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="lookups waiting for the broker to be back (verdict measure); they are sent then",
    )
    console_url = serializers.CharField()


class ErrorOut(serializers.Serializer[JSONObject]):
    error = serializers.CharField()
    detail = serializers.CharField()


class InvalidAnswerOut(serializers.Serializer[JSONObject]):
    error = serializers.ChoiceField(
        choices=["invalid_answer", "not_rememberable", "unknown_slot", "not_answerable"],
        help_text="invalid_answer: the question's schema refuses the answer; not_rememberable: `remember` "
        "names a slot whose sources lack user_answer or preset. Nothing is settled; the attempt is audited",
    )
    detail = serializers.CharField()
    slot = serializers.CharField(
        required=False, help_text="the answer's slot key (invalid_answer, not_rememberable)"
    )
    reason = serializers.CharField(required=False, help_text="what the question's schema refuses")
