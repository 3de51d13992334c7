from typing import Any

from django.core.management.base import BaseCommand

from console.tasks import trigger_due


class Command(BaseCommand):
    help = (
        "Preflight again every deferred execution whose time has come, and every execution whose lookups "
        "were lost. Embedded mode has no worker to run ETA tasks and a broker can lose one: run it from cron."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"re-preflighted {trigger_due()} execution(s)")
