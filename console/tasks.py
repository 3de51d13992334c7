"""Celery tasks: lookups (one frontier, one group of tasks, each running a batch of its lookups at the same
time; the last to finish preflights again) and triggers.

Tasks take ids, fetch, call a service, and return nothing: no result backend is involved, so publishing
a group costs the API one broker round trip and nothing else (a Redis result backend would subscribe the web
process to every task's result channel, and, with Redis down, stall the request ~20 s in its reconnect loop).

Every task is safe to run twice. A lookup fills its pending Observation row once (a redelivered copy finds it
filled, and does not run it again). Whichever task of a group finishes last, seen under the execution's row
lock, preflights again;
a copy that comes after that changes nothing. A trigger acts only on an execution that is still deferred
and due, decided under the same lock (two copies of it may fire together).

Redis redelivers a task that is not acked within the broker's visibility timeout, and a worker holds an ETA
task unacked until its time. A trigger further ahead than that would be delivered again and again while it
waits, so a far trigger is scheduled in hops: each hop that fires early schedules the next one.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import current_app, group, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone
from kombu.exceptions import KombuError
from redis.exceptions import RedisError

from console import connectors, models, notifications
from console.audit import audit_anchor
from console.errors import NotFound
from console.selectors.lookups import infra_retry_due
from console.services.common import json_safe, lock_execution
from console.services.executions import execution_repreflight
from console.services.gate import runs_reconcile
from console.services.lookups import (
    LookupResult,
    lookups_sent,
    lookups_settled,
    lookups_unsent,
    observations_fill,
)
from console.services.review import holds_expire
from console.storage import json_value, raw_rows, table

logger = logging.getLogger(__name__)

# Beyond any measure's own timeout (PREFLIGHT_MEASURE_TIMEOUT_MAX_S): the connector times out first and
# records an error. Inside the broker's visibility timeout, so a running task is never delivered twice.
_LOOKUP_SOFT_LIMIT_S = settings.PREFLIGHT_LOOKUP_SOFT_LIMIT_S
_LOOKUP_HARD_LIMIT_S = settings.PREFLIGHT_LOOKUP_HARD_LIMIT_S
_FILL_GRACE_S = 0.005  # see `_run_lookups`


def dispatch_lookups(execution_id: str, keys: Sequence[str]) -> bool:
    """Run after commit. If the broker is down (or frozen: publishing fails within its socket timeout), the
    lookups stay pending, marked as waiting to be sent, and the sweep sends them when it is back. True if
    the lookups went to the broker; False if they ran here (in-process tasks) or wait to be sent, that is,
    if the answer must be read back."""
    try:
        return _send(execution_id, keys)
    except (KombuError, RedisError, OSError) as exc:  # the broker, not the lookups
        # A part of the group that did go out, sent again by the sweep, runs twice and is recorded once.
        logger.warning("lookups for %s not dispatched: %s", execution_id, exc)
        lookups_unsent(execution_id=execution_id, keys=keys, reason=f"broker unavailable ({exc})")
        return False


def _send(execution_id: str, keys: Sequence[str]) -> bool:
    """Publish the frontier's group; False if it ran in-process instead. Raises what the broker raises."""
    frontier = group(_lookup_tasks(execution_id, keys))
    if current_app.conf.task_always_eager:
        frontier.apply_async()  # in-process: there is no broker to batch for
        return False
    # The whole frontier in one Redis round trip (kombu pipelines the pushes), so its lookups start
    # together. One round trip per task let the worker's threads take the GIL between two pushes, and the
    # last lookup of a level started well after the first (bench/lookups.py).
    # declare=[]: Celery routes to the default exchange, which on Redis pushes straight onto the queue's
    # list; "declaring" the queue before each push only checked kombu's cache of what was declared, a
    # good part of the CPU of publishing a frontier. The worker declares the queues it consumes.
    with current_app.producer_or_acquire() as producer, producer.batch():
        frontier.apply_async(producer=producer, declare=[])
    return True


def _lookup_tasks(execution_id: str, keys: Sequence[str]) -> list[Any]:
    """The frontier's tasks: its lookups in batches of up to PREFLIGHT_LOOKUPS_PER_TASK, each batch one task
    that runs its lookups at the same time.

    A task costs a threads-pool worker CPU of its own (receiving, tracing, acking), and the tasks of a
    frontier start and finish together, under the worker's one GIL: one task per lookup kept a frontier
    waiting longer, per level, for CPU alone (bench/lookups.py). Large frontiers still spread over several
    tasks, and so over workers."""
    per = settings.PREFLIGHT_LOOKUPS_PER_TASK
    tasks = []
    for at in range(0, len(keys), per):
        batch = list(keys[at : at + per])
        # argsrepr: what Celery would write (the args are short strings) without its generic saferepr.
        if len(batch) == 1:
            tasks.append(measure_run.si(execution_id, batch[0]).set(argsrepr=repr((execution_id, batch[0]))))
        else:
            tasks.append(measure_batch.si(execution_id, batch).set(argsrepr=repr((execution_id, batch))))
    return tasks


def _eta_horizon() -> timedelta:
    """How far ahead one ETA task may be: well inside the broker's visibility timeout."""
    options = current_app.conf.broker_transport_options or {}
    return timedelta(seconds=float(options.get("visibility_timeout") or 3600) / 2)


def schedule_trigger(execution_id: str, at: datetime) -> None:
    """Run after commit: preflight again at trigger time (or hop closer to it, see the module docstring)."""
    if not current_app.conf.task_always_eager:  # in-process tasks have no broker to redeliver them
        at = min(at, timezone.now() + _eta_horizon())
    try:
        execution_trigger.apply_async(args=[execution_id], eta=at)
    except (KombuError, RedisError, OSError) as exc:
        # The record stays `deferred`; `manage.py trigger_due` (cron) catches executions whose task was lost.
        logger.error("deferred trigger for %s not scheduled: %s", execution_id, exc)


# A database or broker that goes away for a moment must not strand an execution in `measure`: the task is
# retried (a new message, this one acked) with exponential backoff and jitter, ~2 min in all. Every task is
# safe to run again (module docstring); a lookup already recorded is not run again.
_TRANSIENT = (OperationalError, InterfaceError, KombuError, RedisError, ConnectionError)
_RETRY = {
    "autoretry_for": _TRANSIENT,
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 10,
}
# measure_run's and measure_batch's: bounded by the limits above, retried like every task.
_LOOKUP_TASK = {
    "acks_late": True,
    "ignore_result": True,
    "soft_time_limit": _LOOKUP_SOFT_LIMIT_S,
    "time_limit": _LOOKUP_HARD_LIMIT_S,
    **_RETRY,
}


@shared_task(**_LOOKUP_TASK)
def measure_run(execution_id: str, key: str) -> None:
    """One lookup of a frontier."""
    _run_lookups(execution_id, [key])


@shared_task(**_LOOKUP_TASK)
def measure_batch(execution_id: str, keys: list[str]) -> None:
    """Several lookups of a frontier, run at the same time (see `_lookup_tasks`)."""
    _run_lookups(execution_id, keys)


def _run_lookups(execution_id: str, keys: Sequence[str]) -> None:
    """Run the pending lookups of these keys and record their results as they come, the last of them with
    the settle, which preflights again if none of the execution's is pending any more. A key found done
    already is a redelivered copy's: that lookup is not run again (a copy may still owe the preflight)."""
    lookups = _pending_lookups(execution_id, keys)
    # All started first (an HTTP lookup on the process's HTTP loop, any other in a thread of its own), then
    # collected: results are recorded from this thread, whose database connection is kept across tasks, and
    # all that came in meanwhile in one statement. The answers of a frontier come close together; one
    # statement each kept the last waiting for every lookup before it.
    with connectors.StartedMeasure.together():
        running = [(lookup, _start(lookup)) for lookup in lookups]
    filled = 0
    last: list[LookupResult] = []
    try:
        while running:
            running[0][1].wait()
            # Those still out get a moment more, so that one statement records a frontier whose answers come
            # close together. Nothing waits on an early fill: the execution is preflighted again only once
            # none of its lookups is pending. A second fill of a level lands on the critical path, waiting
            # for the GIL while the answers are parsed.
            connectors.StartedMeasure.wait_all([started for _, started in running[1:]], _FILL_GRACE_S)
            done: list[tuple[Any, Any]] = []
            waiting: list[tuple[Any, Any]] = []
            for item in running:
                (done if item[1].wait(0) else waiting).append(item)
            running = waiting
            results = [_observed(lookup, started) for lookup, started in done]
            if running:
                filled += observations_fill(results=results)
            else:
                last = results  # recorded by the settle, under the row lock
    except SoftTimeLimitExceeded:
        # Past every measure's own timeout (prefork workers only): what still runs is an error, recorded now.
        error = f"timed out after {_LOOKUP_SOFT_LIMIT_S}s"
        last = [LookupResult(lookup.observation_id, None, error, timezone.now()) for lookup, _ in running]
    lookups_settled(execution_id=execution_id, filled=filled > 0, results=last)


@dataclass(frozen=True, slots=True)
class _Lookup:
    observation_id: int
    lookup: str
    args: dict[str, Any]
    measure: dict[str, Any] | None  # the connector spec of the Measure it runs; None if none is registered


def _pending_lookups(execution_id: str, keys: Sequence[str]) -> list[_Lookup]:
    """The pending observation of each key (the first, if a key has several) and the measure it runs, in one
    plain query: everything a lookup does before its call sits between the lookups of a frontier starting
    (they share the worker's GIL), and the ORM spent more CPU building these small queries than PostgreSQL
    spent running them."""
    if not keys:
        return []
    pk = models.Execution._meta.pk
    assert pk is not None
    execution_pk = pk.get_db_prep_value(uuid.UUID(execution_id), connection)
    pending = raw_rows(_pending_sql(connection.vendor, len(keys)), [execution_pk, *keys])
    found: dict[str, _Lookup] = {}
    for obs_id, key, name, args, m_name, kind, url, timeout_s, config in pending:
        if key in found:
            continue
        spec = None
        if m_name is not None:
            spec = {
                "name": m_name,
                "kind": kind,
                "url": url,
                "timeout_s": timeout_s,
                "config": json_value(config),
            }
        found[key] = _Lookup(obs_id, name, json_value(args), spec)
    return [found[key] for key in dict.fromkeys(keys) if key in found]


@functools.cache
def _pending_sql(vendor: str, n: int) -> str:
    obs, measure = models.Observation, models.Measure
    return (
        "SELECT o.id, o.key, o.lookup, o.args, m.name, m.kind, m.url, m.timeout_s, m.config"
        f" FROM {table(obs)} o LEFT JOIN {table(measure)} m ON m.name = o.lookup"
        f" WHERE o.execution_id = %s AND o.key IN ({', '.join(['%s'] * n)}) AND o.observed_at IS NULL"
        " ORDER BY o.id"
    )


def _start(lookup: _Lookup) -> connectors.StartedMeasure:
    if lookup.measure is None:
        return connectors.StartedMeasure(
            "", failed=connectors.MeasureFailed(f"no measure is registered as {lookup.lookup!r}")
        )
    return connectors.start_measure(lookup.measure, lookup.args)


def _observed(lookup: _Lookup, started: connectors.StartedMeasure) -> LookupResult:
    """A lookup's value or error, and when. A lookup's failure is an error, never "no result"."""
    try:
        value, observed_at = started.result()
        if observed_at.tzinfo is None:
            # A naive time cannot be compared with a max age; read it as UTC rather than fail the lookup.
            observed_at = observed_at.replace(tzinfo=UTC)
        return LookupResult(lookup.observation_id, json_safe(value), None, observed_at)
    except connectors.MeasureFailed as exc:
        error = str(exc) or type(exc).__name__
    except Exception as exc:
        logger.exception("measure %s raised", lookup.lookup)
        error = f"{type(exc).__name__}: {exc}"
    return LookupResult(lookup.observation_id, None, error, timezone.now())


@shared_task(acks_late=True, ignore_result=True, **_RETRY)
def execution_trigger(execution_id: str) -> None:
    not_before = _trigger_if_due(execution_id)
    if not_before is not None and not current_app.conf.task_always_eager:
        # Early: a hop of a far trigger, or a broker that delivered before the ETA. (Eager mode runs ETA
        # tasks at once; there, `manage.py trigger_due` is what fires them.)
        schedule_trigger(execution_id, not_before)


def _trigger_if_due(execution_id: Any, now: datetime | None = None) -> datetime | None:
    """Preflight a deferred execution again if its time has come, deciding under its row lock: two copies
    of a trigger (or the ETA task and the cron fallback) may fire at once. Returns its time if not due yet."""
    with transaction.atomic():
        try:
            execution = lock_execution(execution_id)
        except NotFound:
            return None  # no such execution
        if execution.verdict != "deferred" or execution.timing_at is None:
            return None  # already preflighted again (a duplicate delivery), or no longer deferred
        if (now or timezone.now()) < execution.timing_at:
            return execution.timing_at
        execution_repreflight(execution_id=execution_id, trigger="deferred")
        return None


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
            execution__verdict="measure",
            observed_at__isnull=True,
            unsent__isnull=True,  # waiting for the broker, not lost: `lookups_resend` sends them
            dispatched_at__lt=lost_before,
        ).values_list("execution_id", flat=True)
    )
    for pk in due:
        _trigger_if_due(pk, now)  # the ETA task may fire at the same moment: only one of them acts
    for pk in stuck - due:
        execution_repreflight(execution_id=pk, trigger="lookups")
    return len(due | stuck)


def lookups_resend() -> int:
    """Send the lookups that wait for the broker (it refused them, or did not answer in time); returns how
    many executions' lookups went. Published first, marked sent after: one sent twice runs twice and is
    recorded once, one never marked is sent again by the next sweep."""
    waiting: dict[str, list[str]] = {}
    rows = models.Observation.objects.filter(unsent__isnull=False, observed_at__isnull=True).order_by("pk")
    for row_execution, key in rows.values_list("execution_id", "key"):
        waiting.setdefault(str(row_execution), []).append(key)
    sent = 0
    for execution_id, keys in waiting.items():
        try:
            _send(execution_id, keys)
        except (KombuError, RedisError, OSError) as exc:
            logger.warning("lookups waiting for the broker still not sent: %s", exc)
            break  # the broker is still away: the next sweep tries again
        lookups_sent(execution_id=execution_id, keys=keys)
        sent += 1
    return sent


def holds_retry(now: datetime | None = None) -> int:
    """Preflight again the holds whose lost lookup's backoff has passed: the lookup is made again."""
    due = infra_retry_due(now=now)
    for pk in due:
        execution_repreflight(execution_id=pk, trigger="retry")
    return len(due)


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=settings.PREFLIGHT_NOTIFY_RETRIES)
def notification_send(self: Any, notification_id: int) -> None:
    # Eager mode (the embedded demo) has no worker to wait out a backoff: one attempt, then the row says why.
    final = self.request.is_eager or self.request.retries >= self.max_retries
    try:
        notifications.notification_send(notification_id=notification_id, final_attempt=final)
    except notifications.DeliveryFailed as exc:
        raise self.retry(exc=exc, countdown=min(300, 5 * 2**self.request.retries)) from exc


@shared_task(acks_late=True, ignore_result=True, **_RETRY)
def hold_notify(execution_id: str) -> None:
    notifications.hold_notify(execution_id=execution_id)


def sweep(now: datetime | None = None) -> dict[str, int]:
    """The periodic recovery (beat runs it every PREFLIGHT_SWEEP_INTERVAL_S; `manage.py trigger_due` runs
    it by hand): each part decides under the execution's row lock, so two sweeps at once do no harm."""
    return {
        "due": trigger_due(now),
        "sent": lookups_resend(),
        "retried": holds_retry(now),
        "reconciled": runs_reconcile(now=now),
        "expired": holds_expire(now),
        "notified": notifications.notifications_resend(now),
        "anchored": audit_anchor() if settings.PREFLIGHT_AUDIT_CHAINS > 1 else 0,
    }


@shared_task(name="console.tasks.sweep", ignore_result=True)
def sweep_task() -> None:
    done = sweep()
    if any(done.values()):
        logger.info("sweep: %s", done)
