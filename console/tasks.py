"""Celery tasks: lookups (one frontier = one group, its chord preflights again) and deferred triggers.

Tasks take ids, fetch, call a service. Every task is safe to run twice: a lookup fills its pending
Observation row once (a redelivered copy finds it filled), and a trigger only acts on an execution that is
still deferred and due.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import chord, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.utils import timezone
from kombu.exceptions import KombuError
from redis.exceptions import RedisError

from console import connectors, models, services

logger = logging.getLogger(__name__)

# Beyond any measure's own timeout (at most 60 s): the connector times out first and records an error.
_LOOKUP_SOFT_LIMIT_S = 75
_LOOKUP_HARD_LIMIT_S = 90


def dispatch_lookups(execution_id: str, keys: Sequence[str]) -> None:
    """Run after commit. If the broker is down, the lookups become errors: the record says hold, with why."""
    header = [measure_run.si(execution_id, key) for key in keys]
    try:
        chord(header)(lookups_done.si(execution_id))
    except (KombuError, RedisError, OSError) as exc:  # the broker, not the lookups: nothing was dispatched
        logger.warning("lookups for %s not dispatched: %s", execution_id, exc)
        services.lookups_undispatched(
            execution_id=execution_id, keys=keys, reason=f"broker unavailable ({exc})"
        )


def schedule_trigger(execution_id: str, at: datetime) -> None:
    """Run after commit: preflight again at trigger time."""
    try:
        execution_trigger.apply_async(args=[execution_id], eta=at)
    except (KombuError, RedisError, OSError) as exc:
        # The record stays `deferred`; `manage.py trigger_due` (cron) catches executions whose task was lost.
        logger.error("deferred trigger for %s not scheduled: %s", execution_id, exc)


@shared_task(acks_late=True, soft_time_limit=_LOOKUP_SOFT_LIMIT_S, time_limit=_LOOKUP_HARD_LIMIT_S)
def measure_run(execution_id: str, key: str) -> None:
    obs = (
        models.Observation.objects.filter(execution_id=execution_id, key=key, observed_at__isnull=True)
        .order_by("pk")
        .first()
    )
    if obs is None:
        return  # done already: this is a redelivered copy
    measure = models.Measure.objects.filter(name=obs.lookup).first()
    value: Any = None
    error: str | None = None
    observed_at = timezone.now()
    if measure is None:
        error = f"no measure is registered as {obs.lookup!r}"
    else:
        try:
            value, observed_at = connectors.run_measure(measure.as_connector_spec(), obs.args)
            value = services.json_safe(value)
            if observed_at.tzinfo is None:
                # A naive time cannot be compared with a max age; read it as UTC rather than fail the lookup.
                observed_at = observed_at.replace(tzinfo=UTC)
        except SoftTimeLimitExceeded:
            error = f"timed out after {_LOOKUP_SOFT_LIMIT_S}s"
        except connectors.MeasureFailed as exc:
            error = str(exc) or type(exc).__name__
        except Exception as exc:  # a lookup's failure is an error finding (it holds), never "no result"
            logger.exception("measure %s raised", obs.lookup)
            error = f"{type(exc).__name__}: {exc}"
    services.observation_fill(observation_id=obs.pk, value=value, error=error, observed_at=observed_at)


@shared_task(acks_late=True)
def lookups_done(execution_id: str) -> None:
    services.execution_repreflight(execution_id=execution_id, trigger="lookups")


@shared_task(acks_late=True)
def execution_trigger(execution_id: str) -> None:
    execution = models.Execution.objects.filter(pk=execution_id).only("verdict", "timing_at").first()
    if execution is None or execution.verdict != "deferred" or execution.timing_at is None:
        return  # already re-preflighted (a duplicate delivery), or no longer deferred
    if timezone.now() < execution.timing_at:
        # Early: eager mode runs ETA tasks at once, and a broker may deliver before the ETA.
        return
    services.execution_repreflight(execution_id=execution_id, trigger="deferred")


def trigger_due(now: datetime | None = None) -> int:
    """The cron fallback for lost tasks: preflight again every deferred execution whose time has come, and
    every execution still waiting on a lookup that should long have finished."""
    now = now or timezone.now()
    due = set(
        models.Execution.objects.filter(verdict="deferred", timing_at__lte=now).values_list("pk", flat=True)
    )
    lost_before = now - timedelta(seconds=settings.PREFLIGHT_LOOKUP_LOST_AFTER_S)
    stuck = set(
        models.Observation.objects.filter(
            execution__verdict="measure", observed_at__isnull=True, dispatched_at__lt=lost_before
        ).values_list("execution_id", flat=True)
    )
    for pk in due:
        services.execution_repreflight(execution_id=pk, trigger="deferred")
    for pk in stuck - due:
        services.execution_repreflight(execution_id=pk, trigger="lookups")
    return len(due | stuck)
