from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from console import models
from console.demo import review_data, shop
from console.services.catalog import catalog_import
from console.services.executions import execution_answer, execution_create
from console.services.measures import measure_create

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo"
ROLES = ("approver", "operator", "auditor")

# A tool as many real catalogs ship it: its rules only in prose, no declared state change. Preflight holds
# it as a provider gap, which is what the dashboards and gap reports are for.
PROSE_ONLY_TOOL = {
    "name": "cancel_pending_order",
    "description": "Cancel a pending order. The order must not have shipped, and the user must confirm "
    "the cancellation explicitly.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]},
        },
        "required": ["order_id", "reason"],
    },
}


class Command(BaseCommand):
    help = "Load demo data for `make demo`. Safe to run repeatedly: existing rows are left alone."

    def handle(self, *args: Any, **options: Any) -> None:
        # The demo account has a published password; it must never appear on a real deployment.
        if not settings.DEBUG:
            raise CommandError("seed_demo only runs with DEBUG on (embedded mode or PREFLIGHT_DEBUG=true)")
        self.seed_demo_user()
        if models.Execution.objects.exists():
            self.stdout.write("executions: already present")
            return
        self.seed_catalog()
        self.seed_executions()

    def seed_demo_user(self) -> None:
        user_model = get_user_model()
        user = user_model.objects.filter(username=DEMO_USERNAME).first()
        if user is None:
            user = user_model.objects.create_superuser(DEMO_USERNAME, email="", password=DEMO_PASSWORD)
            self.stdout.write(f"user {DEMO_USERNAME!r}: created (password {DEMO_PASSWORD!r}, all roles)")
        else:
            self.stdout.write(f"user {DEMO_USERNAME!r}: already present")
        for role in ROLES:
            group, _ = Group.objects.get_or_create(name=role)
            user.groups.add(group)

    def seed_catalog(self) -> None:
        review_data.register_bank()
        catalog_import(
            server=shop.SERVER,
            tools=_shop_tools(),
            annotations_trusted=True,
            connector={"kind": "python"},
            actor="demo",
        )
        measure_create(name="shop.stock", kind="python", timeout_s=2, actor="demo")
        catalog_import(server="retail", tools=[PROSE_ONLY_TOOL], annotations_trusted=False, actor="demo")
        self.stdout.write("catalog: bank, shop (demo MCP servers, in-process) and a prose-only retail tool")

    def seed_executions(self) -> None:
        # Alice's requests, as an agent would submit them: one still missing the source account, one with
        # everything said and waiting for a person (recipient confirmation, a large amount), one small.
        review_data.held_transfer()
        review_data.held_transfer(from_account=review_data.ALICE_MAIN, memo=None)
        review_data.held_transfer(amount=80, from_account=review_data.ALICE_MAIN, memo=None)
        held = review_data.held_transfer(amount=2400)
        execution_answer(
            execution_id=held.id,
            answers={"arg:from_account": review_data.ALICE_SAVINGS},
            answered_by="user:alice",
            channel="agent",
            actor="demo",
        )
        text = "Cancel order W123 please, I ordered by mistake"
        for principal in ("user:carol", "user:dave"):
            execution_create(
                body={
                    "server": "retail",
                    "tool": "cancel_pending_order",
                    "principal": principal,
                    "conversation": [{"role": "user", "content": text, "trusted": True}],
                    "candidates": {
                        "order_id": {"value": "W123", "pointer": _span(text, "W123")},
                        "reason": {
                            "value": "ordered by mistake",
                            "pointer": _span(text, "ordered by mistake"),
                        },
                    },
                    "action_name": _span(text, "Cancel"),
                    "timing": {"mode": "immediate"},
                },
                token=None,
                actor="demo",
            )
        self.stdout.write(f"executions: {models.Execution.objects.count()} created")


def _shop_tools() -> list[dict[str, Any]]:
    from console.demo import inprocess

    return inprocess.tool_definitions(shop.SERVER)


def _span(text: str, part: str) -> dict[str, int]:
    start = text.index(part)
    return {"turn": 0, "start": start, "end": start + len(part)}
