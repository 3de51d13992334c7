from typing import Any

from django.core.management.base import BaseCommand, CommandError

from console.audit import verify_all


class Command(BaseCommand):
    help = (
        "Walk the audit hash chain and name the first broken link (edited, deleted or reordered event); "
        "then check that every stored preflight record still hashes to its digest. Exits non-zero on failure."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        # The console's "verify chain" button runs the same function.
        report = verify_all()
        if report.broken is not None:
            raise CommandError(report.broken)
        # The head is what an auditor keeps elsewhere: a truncated tail is only visible against it.
        self.stdout.write(
            f"audit chain ok: {report.events} events, head seq {report.head}; "
            f"{report.records} records match their digests"
        )
