"""gunicorn's configuration for the console (the Procfile's `web`): `gunicorn -c gunicorn.conf.py`.

Its `timeout` is PREFLIGHT_WEB_TIMEOUT_S, the same variable config/settings.py reads to bound every tool's
timeout (PREFLIGHT_TOOL_TIMEOUT_MAX_S): a run's tool call, and its outcome's write through a database blip,
end before gunicorn would kill the worker mid-call. Everything else comes from the environment too."""

import multiprocessing
import os

wsgi_app = "config.wsgi:application"
bind = f"{os.environ.get('HOST', '0.0.0.0')}:{os.environ.get('PORT', '8000')}"
# Request handling is CPU-bound Python: about one and a half processes per core (bench/api.py).
workers = int(os.environ.get("WEB_CONCURRENCY", max(2, multiprocessing.cpu_count() * 3 // 2)))
timeout = int(os.environ.get("PREFLIGHT_WEB_TIMEOUT_S", "60"))
# A stopping worker finishes the runs it serves: as long as a run may take.
graceful_timeout = timeout
keepalive = 30
backlog = 512
accesslog = os.environ.get("PREFLIGHT_ACCESS_LOG") or None
