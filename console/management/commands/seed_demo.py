from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo"


class Command(BaseCommand):
    help = "Load demo data for `make demo`. Safe to run repeatedly: existing rows are left alone."

    def handle(self, *args: Any, **options: Any) -> None:
        # The demo account has a published password; it must never appear on a real deployment.
        if not settings.DEBUG:
            raise CommandError("seed_demo only runs with DEBUG on (embedded mode or PREFLIGHT_DEBUG=true)")

        self.seed_demo_user()

    def seed_demo_user(self) -> None:
        user_model = get_user_model()
        if user_model.objects.filter(username=DEMO_USERNAME).exists():
            self.stdout.write(f"user {DEMO_USERNAME!r}: already present")
            return

        user_model.objects.create_superuser(DEMO_USERNAME, email="", password=DEMO_PASSWORD)
        self.stdout.write(f"user {DEMO_USERNAME!r}: created (password {DEMO_PASSWORD!r}, superuser)")
