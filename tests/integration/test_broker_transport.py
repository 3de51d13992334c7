"""The broker transport (config/celery.py): kombu's Redis transport, one client per connection pool."""

from __future__ import annotations

from django.conf import settings
from kombu import Connection

from config import celery_app
from config.celery import RedisTransport


def test_a_channel_reuses_one_redis_client_until_its_pool_is_replaced(broker_url: str) -> None:
    with Connection(broker_url, transport=RedisTransport) as conn:
        channel = conn.default_channel
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
            assert first.ping()
        channel._disconnect_pools()  # as after a fork or a reconnect
        with channel.conn_or_acquire() as third:
            assert third is not first
            assert third.connection_pool is channel.pool
            assert third.ping()


def test_the_api_publishes_through_that_transport() -> None:
    assert celery_app.conf.broker_transport == "config.celery:RedisTransport"
    with celery_app.connection_for_write() as conn:
        assert isinstance(conn.transport, RedisTransport)


def test_celery_reads_the_django_settings_it_is_given() -> None:
    conf = celery_app.conf
    assert conf.task_acks_late is settings.CELERY_TASK_ACKS_LATE is True
    assert conf.worker_prefetch_multiplier == settings.CELERY_WORKER_PREFETCH_MULTIPLIER
    assert conf.task_time_limit == settings.CELERY_TASK_TIME_LIMIT
