import logging
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

logger = logging.getLogger(__name__)


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "console/home.html")


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except DatabaseError:
        logger.exception("health check: database query failed")
        return "error"


_brokers: dict[str, Any] = {}


def _broker() -> str:
    """The broker answers a PING within its socket timeout. A client of its own, kept per URL: kombu's
    connection would retry connecting for seconds first."""
    from redis import Redis

    from config import celery_app

    if celery_app.conf.task_always_eager:
        return "unused"  # embedded mode: lookups run in-process
    url = str(celery_app.conf.broker_url)
    try:
        client = _brokers.get(url)
        if client is None:
            timeout = settings.BROKER_SOCKET_TIMEOUT_S
            client = _brokers[url] = Redis.from_url(
                url, socket_connect_timeout=timeout, socket_timeout=timeout, retry_on_timeout=False
            )
        client.ping()
        return "ok"
    except Exception as exc:  # any failure to reach it is "not ready", never a 500
        logger.warning("health check: broker unavailable: %s", exc)
        return "error"


@never_cache
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    # A load balancer must stop sending traffic to a console that cannot record verdicts,
    # so the database is part of "healthy", not just the process answering.
    database = _database()
    ok = database == "ok"
    return JsonResponse({"status": "ok" if ok else "error", "database": database}, status=200 if ok else 503)


@never_cache
@require_GET
def live(request: HttpRequest) -> JsonResponse:
    """Liveness: the process serves requests. Nothing external, so an outage elsewhere does not get every web
    process restarted at once."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def ready(request: HttpRequest) -> JsonResponse:
    """Readiness: the database records and the broker takes lookups. Without the broker executions are still
    recorded (their lookups wait to be sent), so a deployment may route on `database` alone."""
    checks = {"database": _database(), "broker": _broker()}
    ok = all(v in ("ok", "unused") for v in checks.values())
    return JsonResponse({"status": "ok" if ok else "error", **checks}, status=200 if ok else 503)
