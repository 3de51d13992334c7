"""config/startup.py: a long-running process keeps what it loaded at startup out of the collector's way.

Each case runs in an interpreter of its own, since freezing is for the life of a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Whether an object is still among those the collector scans (the permanent generation is not listed).
SCANNED = "def scanned(obj): return any(o is obj for o in gc.get_objects())"


def _python(*lines: str) -> list[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(["import gc", SCANNED, *lines])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_web_application_loads_its_views_at_import_and_freezes_them() -> None:
    frozen, view_scanned = _python(
        "import config.wsgi",
        "from console.api.executions import ExecutionCreateView",
        "print(gc.get_freeze_count(), scanned(ExecutionCreateView))",
    )
    assert int(frozen) > 10_000
    assert view_scanned == "False"


def test_objects_made_after_startup_are_still_collected() -> None:
    (later_scanned,) = _python(
        "import config.wsgi",
        "class Later: pass",
        "later = Later()",
        "print(scanned(later))",
    )
    assert later_scanned == "True"


def test_a_celery_worker_freezes_what_it_loaded_once_it_is_ready() -> None:
    before, after, task_scanned = _python(
        "from celery import signals",
        "import config.celery, django",
        "django.setup()  # as Celery's Django fixup does in a worker",
        "from console.tasks import measure_batch",
        "before = gc.get_freeze_count()",
        "signals.worker_ready.send(sender=None)",
        "print(before, gc.get_freeze_count(), scanned(measure_batch))",
    )
    assert int(before) == 0
    assert int(after) > 10_000
    assert task_scanned == "False"


def test_a_prefork_child_freezes_what_it_inherited_once_it_is_set_up() -> None:
    before, after = _python(
        "from celery import signals",
        "import config.celery",
        "before = gc.get_freeze_count()",
        "signals.worker_process_init.send(sender=None)",
        "print(before, gc.get_freeze_count())",
    )
    assert int(before) == 0
    assert int(after) > 10_000
