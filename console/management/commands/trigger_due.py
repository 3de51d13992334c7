from typing import Any

from django.core.management.base import BaseCommand

from console.tasks import sweep


class Command(BaseCommand):
    help = (
        "The periodic sweep, once: preflight again deferred executions whose time has come and executions "
        "whose lookups were lost, send lookups that waited for the broker, retry holds whose lost lookup's "
        "backoff has passed, and record outcome_unknown for runs that recorded no outcome. Celery beat runs "
        "it every PREFLIGHT_SWEEP_INTERVAL_S (Procfile); embedded mode has no beat: run it from cron."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        done = sweep()
        self.stdout.write(
            f"re-preflighted {done['due']} execution(s); sent the waiting lookups of {done['sent']};"
            f" retried {done['retried']} hold(s); recorded {done['reconciled']} lost run(s)"
        )
