"""What a long-running process (a gunicorn worker, a Celery worker) does once it has loaded what it serves.

Such a process holds ~140,000 objects that live as long as it does: Django, DRF, Celery, the URLconf, the
views, the engine. CPython's collector scans every one of them in each collection of its oldest generation,
which comes every few seconds under load: 55-72 ms each on this machine, on the critical path of whatever
request or lookup level was running (the 12th of 30 runs of bench/lookups.py took 295-310 ms against
~230). `gc.freeze()` moves what exists once startup is done into a permanent generation that the collector
leaves alone; anything made later is collected as before, and only the startup objects that become garbage
later are kept (modules and settings, which do not)."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Collect the garbage of startup, then keep the survivors out of every later collection."""
    gc.collect()
    gc.freeze()


def load_request_path() -> None:
    """Import what the first request would import lazily (the URLconf, and through it every view, DRF and
    the engine), so that it is part of the startup that gets frozen."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - the property imports the URLconf's modules
