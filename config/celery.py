"""The Celery app. Workers start with `celery -A config worker`; tasks live in each app's tasks.py."""

import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from celery import Celery, signals
from kombu.transport import redis as kombu_redis

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

logger = logging.getLogger(__name__)


class _CelerySettings(Mapping[str, Any]):
    """Django's CELERY_* settings, read once, when Celery first reads its configuration.

    Celery looks a setting up under several names in each of its sources, every time it is read: ~7 reads
    per task published or received. Through Django's settings object every name it has no value for raised
    and caught an AttributeError; ~20% of the CPU that publishing a frontier cost. Settings do not change
    while a process runs; tests change Celery's own configuration (`app.conf`), which still wins."""

    def __init__(self) -> None:
        self._values: dict[str, Any] | None = None

    def _all(self) -> dict[str, Any]:
        if self._values is None:
            from django.conf import settings

            self._values = {key: getattr(settings, key) for key in dir(settings) if key.startswith("CELERY_")}
        return self._values

    def __getitem__(self, key: str) -> Any:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


app = Celery("console")
app.config_from_object(_CelerySettings(), namespace="CELERY")
app.autodiscover_tasks()


class _RedisQoS(kombu_redis.QoS):
    """kombu's, except that a channel whose broker connection was lost cannot take the worker down. With
    kombu 5.7 a Redis restart while a task ran ended the worker, stock transport or not (bench/faults.py,
    redis-restart): "Unrecoverable error: AttributeError", when the lost channel gave back its unacked
    messages, and again when the running task finished and was acked on it, each asking for a new pool of
    a connection already torn down. Those messages are still in Redis's unacked index: they come back after
    the visibility timeout, as a killed worker's do (a task that finished runs again, recorded once)."""

    def restore_unacked(self, client: Any = None) -> None:
        try:
            super().restore_unacked(client)
        except AttributeError:
            logger.warning("unacked messages left for the visibility timeout: the broker connection is gone")

    def ack(self, delivery_tag: Any) -> None:
        try:
            super().ack(delivery_tag)
        except AttributeError:
            logger.warning("a message of a lost channel left for the visibility timeout (not acked)")

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            super().reject(delivery_tag, requeue=requeue)
        except AttributeError:
            logger.warning("a message of a lost channel left for the visibility timeout (not rejected)")


class _RedisChannel(kombu_redis.Channel):
    """kombu's Redis channel, with one client object per connection pool instead of one per operation.

    kombu builds a new `redis.Redis` around the same pool for every broker operation that is not a BRPOP: two
    per task with acks_late (the unacked-index entry on receipt, its removal on ack) and one per publish. With
    redis-py 8 a client costs real CPU to build (its response-callback table); in a threads-pool worker
    that CPU is GIL time taken from the lookups of the same frontier (bench/lookups.py). A client holds no
    connection of its own (it takes one from the pool per command, and pipelines are built per call), so one
    may be shared by the channel's threads; it is rebuilt if the channel replaces its pool (after a fork, or
    a reconnect)."""

    QoS = _RedisQoS
    _sync_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self._sync_client
        if client is None or client.connection_pool is not self.pool:
            client = self._sync_client = super()._create_client()
        return client


class RedisTransport(kombu_redis.Transport):
    """The broker transport for redis:// URLs (settings.CELERY_BROKER_TRANSPORT)."""

    Channel = _RedisChannel


# A threads or solo pool runs tasks in the process that got worker_ready; a prefork pool in children, each of
# which gets worker_process_init once it is set up.
@signals.worker_ready.connect
@signals.worker_process_init.connect
def _freeze_startup_objects(**kwargs: Any) -> None:
    from config.startup import freeze_startup_objects

    freeze_startup_objects()  # see config/startup.py


# Celery's Django fixup closes every database connection of the task's thread before and after each task
# (unless CELERY_DB_REUSE_MAX is set, see settings.py), so each lookup paid for a new PostgreSQL connection
# and backend process, and lost its prepared statements. Instead a worker treats a task as Django treats a
# request: the connection is kept across tasks and closed only when CONN_MAX_AGE has passed or it broke.
@signals.task_prerun.connect
@signals.task_postrun.connect
def _close_old_connections(sender: Any = None, **kwargs: Any) -> None:
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return  # runs inside the caller's request or command, whose connection is not the task's to close
    from django.db import close_old_connections

    close_old_connections()
