"""Deployment defaults that must nest: tool timeouts inside the web worker's, tasks inside the broker's."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _settings_with(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import config.settings"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_start_up_refuses_a_tool_timeout_that_cannot_fit_inside_the_web_timeout() -> None:
    refused = _settings_with(PREFLIGHT_WEB_TIMEOUT_S="20", PREFLIGHT_TOOL_TIMEOUT_S="30")
    fits = _settings_with(PREFLIGHT_WEB_TIMEOUT_S="20", PREFLIGHT_TOOL_TIMEOUT_S="12")

    assert refused.returncode != 0
    assert "PREFLIGHT_TOOL_TIMEOUT_S (30)" in refused.stderr and "at most 12" in refused.stderr
    assert fits.returncode == 0, fits.stderr


def test_the_shipped_gunicorn_timeout_is_the_one_the_tool_timeouts_fit_inside(settings: Any) -> None:
    config = runpy.run_path(str(ROOT / "gunicorn.conf.py"))

    assert config["timeout"] == settings.PREFLIGHT_WEB_TIMEOUT_S
    assert settings.PREFLIGHT_TOOL_TIMEOUT_S <= settings.PREFLIGHT_TOOL_TIMEOUT_MAX_S
    assert settings.PREFLIGHT_WEB_TIMEOUT_S - settings.PREFLIGHT_TOOL_TIMEOUT_MAX_S >= 8


def test_by_default_a_task_lost_with_its_worker_comes_back_within_a_minute_and_never_while_it_runs(
    settings: Any,
) -> None:
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    visibility = options["visibility_timeout"]

    assert visibility + options["unacked_restore_interval"] <= 60
    assert visibility > settings.PREFLIGHT_LOOKUP_HARD_LIMIT_S > settings.PREFLIGHT_MEASURE_TIMEOUT_MAX_S
    assert visibility > settings.CELERY_TASK_TIME_LIMIT
    # Publishing to a frozen broker gives up well under a second (one retry).
    retries = settings.CELERY_TASK_PUBLISH_RETRY_POLICY["max_retries"]
    assert (1 + retries) * options["socket_timeout"] < 1


def test_beat_runs_the_sweep() -> None:
    from config import celery_app
    from console import tasks

    assert tasks.sweep_task.name == "console.tasks.sweep"
    (entry,) = celery_app.conf.beat_schedule.values()
    assert entry["task"] == "console.tasks.sweep"
    assert entry["task"] in celery_app.tasks


def test_an_mcp_run_connects_and_calls_inside_the_web_workers_limit_whatever_was_configured(
    settings: Any,
) -> None:
    from console.services.gate import _run_timeouts

    limit = settings.PREFLIGHT_TOOL_TIMEOUT_MAX_S
    for connector in (
        {"kind": "mcp_http", "url": "https://tools.example/mcp"},  # defaults: 30 s call, connect max(30, 10)
        {"kind": "mcp_stdio", "command": "x", "timeout_s": 300, "connect_timeout_s": 120},  # stored before
    ):
        fitted, timeout = _run_timeouts(connector)
        assert timeout <= limit
        assert fitted["connect_timeout_s"] + timeout <= limit + 5  # +1 s grace: inside the margin
        assert timeout + fitted["connect_timeout_s"] + 1 < settings.PREFLIGHT_WEB_TIMEOUT_S - 5
