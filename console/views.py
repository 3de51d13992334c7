import logging

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

logger = logging.getLogger(__name__)


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "console/home.html")


@never_cache
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    # A load balancer must stop sending traffic to a console that cannot record verdicts,
    # so the database is part of "healthy", not just the process answering.
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database = "ok"
    except DatabaseError:
        logger.exception("health check: database query failed")
        database = "error"

    ok = database == "ok"
    return JsonResponse({"status": "ok" if ok else "error", "database": database}, status=200 if ok else 503)
