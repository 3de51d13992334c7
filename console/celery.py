"""The Celery app. Workers start with `celery -A console worker`; tasks live in each app's tasks.py."""

import os
from typing import Any

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


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
