"""The one settings module. Every deployment difference comes from the environment (see config/env.py).

Embedded mode is what you get with no DATABASE_URL: SQLite under var/, lookups run in-process (eager Celery),
DEBUG on. Setting DATABASE_URL switches to server mode: PostgreSQL, a real broker, DEBUG off unless asked.
"""

import hashlib
import os
import shlex
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.env import (
    env_assignments,
    env_bool,
    env_command_lines,
    env_hosts,
    env_int,
    env_list,
    env_path,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

EMBEDDED = env_str("DATABASE_URL", "") == ""

DEBUG = env_bool("PREFLIGHT_DEBUG", default=EMBEDDED)

if DEBUG:
    SECRET_KEY = env_str("PREFLIGHT_SECRET_KEY", "dev-only-insecure-key-never-use-in-production")
else:
    # No default: a production console signing sessions with a key from the source tree is worse than one
    # that refuses to start.
    SECRET_KEY = env_str("PREFLIGHT_SECRET_KEY")

ALLOWED_HOSTS = env_list("PREFLIGHT_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("PREFLIGHT_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_htmx",
    "csp",
    "axes",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outside every guard below, so their refusals (413, 400) carry the policy as well.
    "csp.middleware.CSPMiddleware",
    # Before anything reads the body: an oversized agent request is a 413 in the API's error shape.
    "console.middleware.APIBodyLimitMiddleware",
    "console.middleware.NulRefusalMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # Project templates come first so they can override third-party ones (drf_spectacular/redoc.html).
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.web.access.console_roles",
            ],
            # `when`, the console's one way to write a time, on every page without a {% load %} each.
            "builtins": ["console.templatetags.console_format"],
        },
    },
]

# Database

_DEFAULT_DATABASE_URL = f"sqlite:///{VAR_DIR / 'preflight.sqlite3'}"
if EMBEDDED:
    VAR_DIR.mkdir(exist_ok=True)

try:
    DATABASES = {
        "default": dj_database_url.parse(
            env_str("DATABASE_URL", _DEFAULT_DATABASE_URL),
            conn_max_age=env_int("PREFLIGHT_DB_CONN_MAX_AGE", 60),
            conn_health_checks=True,
        )
    }
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is malformed: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Embedded mode. A transaction that reads first and writes later (every service) would be refused at once
    # ("database is locked") when another writer holds the file, since SQLite cannot wait on a read lock it
    # must upgrade: BEGIN IMMEDIATE takes the write lock up front, and waits for it up to the timeout.
    DATABASES["default"].setdefault("OPTIONS", {}).update(transaction_mode="IMMEDIATE", timeout=20)
    # Tests on SQLite use a file too: Django's default in-memory test database shares one cache between
    # connections, where a writer locks tables and another connection fails at once instead of waiting.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
# PostgreSQL parses and plans a statement each time unless it is prepared. With server-side parameter binding,
# psycopg prepares a statement once it has run 5 times on a connection (connections persist, see above), and
# sends parameters apart from the SQL instead of quoting them into it. bench/api.py, POST /executions: about
# 1.5 ms less PostgreSQL CPU and 2-3 ms less server CPU per request. Turn it off behind a PgBouncer in
# transaction-pooling mode that does not track prepared statements.
_POSTGRESQL = DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
if _POSTGRESQL and env_bool("PREFLIGHT_DB_PREPARED_STATEMENTS", default=True):
    DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=5)
if _POSTGRESQL:
    # The same backend, with a health check that needs no round trip while the connection is sound.
    DATABASES["default"]["ENGINE"] = "console.pgbackend"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis and Celery

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

CELERY_BROKER_URL = REDIS_URL
# kombu's Redis transport with one client object per pool instead of one per broker operation (see
# config/celery.py). rediss:// keeps kombu's own: kombu sets up TLS from that scheme only when it picks the
# transport itself.
if REDIS_URL.startswith("redis://"):
    CELERY_BROKER_TRANSPORT = "config.celery:RedisTransport"
# No result backend: tasks record their outcome in the database, and nobody waits on a task's result.
CELERY_TASK_IGNORE_RESULT = True
# Embedded mode has no worker, so lookups run in-process; server mode must never silently do that.
CELERY_TASK_ALWAYS_EAGER = env_bool("PREFLIGHT_EAGER_TASKS", default=EMBEDDED)
CELERY_TASK_EAGER_PROPAGATES = True
# A lookup lost with its worker is redelivered rather than dropped; a lost lookup would leave a slot pending.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# Two messages per pool slot. With one, a worker whose slots all held lookups could not take the whole next
# frontier: the last lookup of a level is the task that dispatches the next one, so the next level's last
# message was fetched only once that task had finished and been acked (5-10 ms later in bench/lookups.py).
# Lookups are short, so two per slot hoards little.
CELERY_WORKER_PREFETCH_MULTIPLIER = 2
# Celery's Django fixup closes the task thread's database connections around every task unless this is set;
# it then closes them after this many tasks x 2. Practically never: config/celery.py closes them instead
# as Django does after a request (CONN_MAX_AGE passed, or the connection broke). A new connection per lookup
# cost a PostgreSQL backend start each (bench/lookups.py).
CELERY_DB_REUSE_MAX = 2**62
# A measure's timeout, the lookup task's time limits and the broker's visibility timeout nest: a lookup lost
# with its worker is redelivered within a minute (visibility timeout + restore interval: 40 + 5 s), and a
# task still running is never redelivered (its hard limit ends it first).
PREFLIGHT_MEASURE_TIMEOUT_MAX_S = 25
PREFLIGHT_LOOKUP_SOFT_LIMIT_S = PREFLIGHT_MEASURE_TIMEOUT_MAX_S + 5
PREFLIGHT_LOOKUP_HARD_LIMIT_S = PREFLIGHT_MEASURE_TIMEOUT_MAX_S + 10
CELERY_TASK_TIME_LIMIT = env_int("PREFLIGHT_TASK_TIME_LIMIT_S", PREFLIGHT_LOOKUP_HARD_LIMIT_S)
CELERY_TASK_SOFT_TIME_LIMIT = max(1, CELERY_TASK_TIME_LIMIT - 5)
CELERY_TIMEZONE = "UTC"

# One queue name per deployment (and per test session, so parallel sessions never take each other's tasks).
CELERY_TASK_DEFAULT_QUEUE = env_str("PREFLIGHT_CELERY_QUEUE", "celery")
# Redis redelivers a task not acked within the visibility timeout: that is how a lookup lost with its worker
# comes back, and why deferred triggers are scheduled in hops shorter than it (console/tasks.py).
# Sized to the longest task (its hard limit) plus a margin, not kombu's default hour.
BROKER_VISIBILITY_TIMEOUT_S = env_int(
    "PREFLIGHT_BROKER_VISIBILITY_TIMEOUT_S", max(PREFLIGHT_LOOKUP_HARD_LIMIT_S, CELERY_TASK_TIME_LIMIT) + 5
)
# Fail fast when Redis is unreachable or frozen: a publish waits at most this long for an answer (twice, with
# the one retry), and the API records the lookups as waiting to be sent instead of holding a web worker
# (seconds each, with kombu's 5 s). Redis answers in well under a millisecond on a healthy network.
BROKER_SOCKET_TIMEOUT_S = env_int("PREFLIGHT_BROKER_TIMEOUT_MS", 250, minimum=10) / 1000
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_connect_timeout": BROKER_SOCKET_TIMEOUT_S,
    "socket_timeout": BROKER_SOCKET_TIMEOUT_S,
    "visibility_timeout": BROKER_VISIBILITY_TIMEOUT_S,
    # How often a worker sweeps for tasks whose visibility timeout ran out (kombu's default is ~100 s).
    "unacked_restore_interval": max(1, min(10, BROKER_VISIBILITY_TIMEOUT_S // 8)),
    "unacked_restore_throttle": 1 if BROKER_VISIBILITY_TIMEOUT_S < 600 else 10,
}
CELERY_REDIS_SOCKET_CONNECT_TIMEOUT = BROKER_SOCKET_TIMEOUT_S
CELERY_REDIS_SOCKET_TIMEOUT = BROKER_SOCKET_TIMEOUT_S
# One retry, at once: it reconnects through a pooled connection that a Redis restart closed.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2}

# Lookups per Celery task: a frontier is one group of tasks, each running up to this many of its lookups at
# the same time (1: a task per lookup). See console/tasks.py `_lookup_tasks`.
PREFLIGHT_LOOKUPS_PER_TASK = env_int("PREFLIGHT_LOOKUPS_PER_TASK", 10, minimum=1)
# A pending lookup older than this is taken as lost (error finding) at the next preflight.
PREFLIGHT_LOOKUP_LOST_AFTER_S = env_int("PREFLIGHT_LOOKUP_LOST_AFTER_S", 2 * CELERY_TASK_TIME_LIMIT)
# A lost lookup is our infrastructure's fault, not the provider's: it holds, and is looked up again at the
# next preflight (an answer, a GET, the sweep) after this backoff, doubling up to the max, this many times.
PREFLIGHT_LOOKUP_RETRY_S = env_int("PREFLIGHT_LOOKUP_RETRY_S", 5, minimum=1)
PREFLIGHT_LOOKUP_RETRY_MAX_S = env_int("PREFLIGHT_LOOKUP_RETRY_MAX_S", 300, minimum=1)
PREFLIGHT_LOOKUP_RETRIES = env_int("PREFLIGHT_LOOKUP_RETRIES", 5, minimum=0)

# The periodic work, run by `celery -A config beat` (Procfile): deferred executions that are due, lookups
# waiting for the broker or lost, holds whose infrastructure retry is due, runs that recorded no outcome.
PREFLIGHT_SWEEP_INTERVAL_S = env_int("PREFLIGHT_SWEEP_INTERVAL_S", 10, minimum=1)
CELERY_BEAT_SCHEDULE = {
    "sweep": {
        "task": "console.tasks.sweep",
        "schedule": float(PREFLIGHT_SWEEP_INTERVAL_S),
        # A sweep not started by the next one is dropped, not piled up behind a stopped worker.
        "options": {"expires": float(PREFLIGHT_SWEEP_INTERVAL_S)},
    }
}

# The audit hash chain is one lock for the whole deployment; past what one chain takes (bench/audit.py,
# bench/RESULTS.md) it is split into this many chains by execution, their heads anchored in chain 0 by the
# sweep. `verify_audit` walks them all. Raise it only: an execution's chain is its id modulo this number.
PREFLIGHT_AUDIT_CHAINS = env_int("PREFLIGHT_AUDIT_CHAINS", 1, minimum=1)

# Grants

PREFLIGHT_SIGNING_KEY_PATH = env_path("PREFLIGHT_SIGNING_KEY_PATH", VAR_DIR / "grant_signing_key.pem")
# Short: a grant is for running the call now, not a standing permission.
PREFLIGHT_GRANT_TTL_S = env_int("PREFLIGHT_GRANT_TTL_S", 300)

# The execution gate calls the tool inside the web request, so every tool timeout must end well before the
# serving process's own limit (gunicorn's `timeout`, gunicorn.conf.py reads this same variable): past it the
# worker is killed mid-call and the agent gets an HTML 500 with no outcome. A connector's own `timeout_s`
# above PREFLIGHT_TOOL_TIMEOUT_MAX_S is refused when it is configured.
PREFLIGHT_WEB_TIMEOUT_S = env_int("PREFLIGHT_WEB_TIMEOUT_S", 60, minimum=10)
# Left for what a run does besides the call: the gate's transaction before, the outcome's (with its retries
# through a database blip, PREFLIGHT_OUTCOME_WRITE_S) after.
PREFLIGHT_RUN_MARGIN_S = max(8, PREFLIGHT_WEB_TIMEOUT_S // 4)
PREFLIGHT_TOOL_TIMEOUT_MAX_S = PREFLIGHT_WEB_TIMEOUT_S - PREFLIGHT_RUN_MARGIN_S
PREFLIGHT_TOOL_TIMEOUT_S = env_int(
    "PREFLIGHT_TOOL_TIMEOUT_S", min(30, PREFLIGHT_TOOL_TIMEOUT_MAX_S), minimum=1
)
if PREFLIGHT_TOOL_TIMEOUT_S > PREFLIGHT_TOOL_TIMEOUT_MAX_S:
    raise ImproperlyConfigured(
        f"PREFLIGHT_TOOL_TIMEOUT_S ({PREFLIGHT_TOOL_TIMEOUT_S}) must leave {PREFLIGHT_RUN_MARGIN_S}s inside"
        f" PREFLIGHT_WEB_TIMEOUT_S ({PREFLIGHT_WEB_TIMEOUT_S}): at most {PREFLIGHT_TOOL_TIMEOUT_MAX_S}"
    )
# A run started (its grant consumed) with no outcome recorded this long after is recorded `outcome_unknown`
# by the sweep: the process that ran it was killed past its limit, or could not write the outcome.
PREFLIGHT_RUN_LOST_AFTER_S = env_int("PREFLIGHT_RUN_LOST_AFTER_S", PREFLIGHT_WEB_TIMEOUT_S + 30, minimum=1)
# How long a run keeps trying to write its outcome through a database blip before it answers
# `outcome_unknown` (and leaves the record to the sweep).
PREFLIGHT_OUTCOME_WRITE_S = 5

# MCP servers this host may start over stdio, as comma-separated command lines (shell-quoted); a connector's
# command must equal one of them exactly: no extra arguments (an interpreter's -c, a server's --config are
# code), no env and no cwd from a connector. A stdio connector runs a program as this server's user, so the
# deployment names what may run. Default: the bundled demo servers only.
PREFLIGHT_MCP_STDIO_ALLOW = env_command_lines(
    "PREFLIGHT_MCP_STDIO_ALLOW",
    [
        f"{shlex.quote(python)} -m console.demo.{demo}{transport}"
        for python in dict.fromkeys(("python", "python3", sys.executable))
        for demo in (
            *("bank", "shop", "bookstore", "mail"),
            *(f"home --provider {provider}" for provider in ("lumen", "homebase", "tips")),
        )
        for transport in ("", " --transport stdio")
    ],
)
# The whole environment a stdio server starts with (NAME=value, comma-separated; over the MCP SDK's own short
# list of inherited names, HOME LOGNAME PATH SHELL TERM USER): never this process's secrets, never a
# connector's. And the directory it starts in.
PREFLIGHT_MCP_STDIO_ENV = env_assignments(
    "PREFLIGHT_MCP_STDIO_ENV",
    {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"},
)
PREFLIGHT_MCP_STDIO_CWD = env_path("PREFLIGHT_MCP_STDIO_CWD", BASE_DIR)
# Hosts HTTP lookups and MCP HTTP connectors may reach: comma-separated `host` (any port) or `host:port`,
# checked on the URL as written and again on every address it resolves to (console/egress.py). Redirects are
# never followed. Default: the demo's loopback MCP servers only.
PREFLIGHT_HTTP_ALLOW = env_hosts(
    "PREFLIGHT_HTTP_ALLOW",
    [f"{host}:{port}" for host in ("127.0.0.1", "localhost") for port in (8765, 8766)],
)

# Approver notifications (console/notifications.py): mail through Django's SMTP backend. Without a mail host,
# email notifications are recorded as failed (server mode) or printed (the embedded demo), never dropped.
PREFLIGHT_EMAIL_HOST = env_str("PREFLIGHT_EMAIL_HOST", "")
DEFAULT_FROM_EMAIL = env_str("PREFLIGHT_EMAIL_FROM", "preflight@localhost")
if PREFLIGHT_EMAIL_HOST or not EMBEDDED:
    MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {
                "host": PREFLIGHT_EMAIL_HOST,
                "port": env_int("PREFLIGHT_EMAIL_PORT", 25, minimum=1),
                "username": env_str("PREFLIGHT_EMAIL_USER", ""),
                "password": env_str("PREFLIGHT_EMAIL_PASSWORD", ""),
                "use_tls": env_bool("PREFLIGHT_EMAIL_TLS", False),
                "timeout": env_int("PREFLIGHT_EMAIL_TIMEOUT_S", 10, minimum=1),
            },
        }
    }
else:
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.console.EmailBackend"}}
# Webhook notifications go through the same egress checks as lookups (PREFLIGHT_HTTP_ALLOW); each is tried
# this many times, backing off, before it is recorded as failed.
PREFLIGHT_NOTIFY_RETRIES = env_int("PREFLIGHT_NOTIFY_RETRIES", 5, minimum=0)
PREFLIGHT_NOTIFY_TIMEOUT_S = env_int("PREFLIGHT_NOTIFY_TIMEOUT_S", 10, minimum=1)

# MCP gateway (`manage.py mcp_gateway`)

# Where people reach the console: the gateway's URL elicitations (a held call's review page) are absolute.
PREFLIGHT_PUBLIC_URL = env_str("PREFLIGHT_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
# Keys that seal the 2026-07-28 `requestState` (the SDK's RequestStateBoundary, AES-256-GCM): comma-separated,
# each at least 32 characters; the first seals, all unseal (rotation). Default: derived from the secret key,
# so every gateway process of one deployment accepts the others' state.
PREFLIGHT_MCP_STATE_KEYS = env_list(
    "PREFLIGHT_MCP_STATE_KEYS",
    [hashlib.sha256(b"preflight/mcp-request-state:" + SECRET_KEY.encode()).hexdigest()],
)
if any(len(key) < 32 for key in PREFLIGHT_MCP_STATE_KEYS):
    raise ImproperlyConfigured("PREFLIGHT_MCP_STATE_KEYS: each key needs at least 32 characters")
# How long a question's `requestState` stays good: the user's time to answer one form.
PREFLIGHT_MCP_STATE_TTL_S = env_int("PREFLIGHT_MCP_STATE_TTL_S", 900, minimum=1)

# Auth

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# The console's own sign-in page (templates/registration/login.html), not the admin's; signing out lands there
# too (Django would otherwise render the admin's "logged out" page).
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Sign-in throttling (django-axes, failures kept in the database so every web process sees them): after
# PREFLIGHT_LOGIN_FAILURE_LIMIT failures for one username, or from one address, sign-in is refused for
# PREFLIGHT_LOGIN_LOCKOUT_MINUTES (429, templates/registration/locked_out.html). Lifted early by
# `manage.py axes_reset` (everyone) or `axes_reset_username USERNAME`.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("PREFLIGHT_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("PREFLIGHT_LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False

# Transport security. Behind TLS (PREFLIGHT_BEHIND_TLS: a proxy terminating HTTPS that sets
# X-Forwarded-Proto and strips it from clients), requests count as secure, HSTS is sent, and cookies are
# Secure unless PREFLIGHT_SECURE_COOKIES says otherwise.
PREFLIGHT_BEHIND_TLS = env_bool("PREFLIGHT_BEHIND_TLS", default=False)
if PREFLIGHT_BEHIND_TLS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("PREFLIGHT_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("PREFLIGHT_HSTS_INCLUDE_SUBDOMAINS", default=False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool(
    "PREFLIGHT_SECURE_COOKIES", default=PREFLIGHT_BEHIND_TLS
)
# Pages read the CSRF token from the template (forms, htmx's hx-headers), never from the cookie.
CSRF_COOKIE_HTTPONLY = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy (django-csp): scripts, styles, images and connections from this origin only, no
# inline script anywhere (page behaviour lives in static/*.js). The API docs page alone loosens style-src
# for Redoc's generated styles (config/urls.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# I18n

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# Static files

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env_path("PREFLIGHT_STATIC_ROOT", VAR_DIR / "collected-static")

# API

# An agent request is a conversation and its candidates; more than 1 MiB is refused with a 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

REST_FRAMEWORK = {
    # JSON only: the browsable API would be an HTML surface (forms, inline script) for agent tokens.
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["console.api.parsers.StrictJSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": ["console.api.auth.BearerTokenAuthentication"],
    "EXCEPTION_HANDLER": "console.api.errors.exception_handler",
    # Fail closed: an API view that forgets to declare its audience is an operator action, closed to agents
    # (console/api/permissions.py); agent views declare `IsAgent`.
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "console.api.permissions.IsOperator",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Preflight agent API",
    "DESCRIPTION": "Submit candidate executions, answer questions, run granted executions.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Vendored under static/vendor/ because the default CDN is unreachable from where the console runs.
    "REDOC_DIST": f"{STATIC_URL}vendor/redoc-2.5.4",
    # Two different choice sets share the field name "outcome"; name each so the schema is stable.
    "ENUM_NAME_OVERRIDES": {
        "FindingOutcomeEnum": ["found", "no_result", "error"],
        "RunOutcomeEnum": ["executed", "failed", "outcome_unknown"],
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "{asctime} {levelname} {name}: {message}", "style": "{"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["stderr"], "level": env_str("PREFLIGHT_LOG_LEVEL", "INFO")},
    # Django gives its own logger a console handler too; without this every line would print twice.
    # httpx logs every request at INFO: a line per lookup and per MCP message is noise, and CPU on the worker.
    "loggers": {"django": {"handlers": [], "propagate": True}, "httpx2": {"level": "WARNING"}},
}
