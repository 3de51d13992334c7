"""What the integration tests run against: a real Celery worker process, a loopback HTTP measure server,
and the switch that points this process's Celery app at a broker.

Imported by tests/integration/conftest.py and the test modules (under its own name: several conftest.py
files share that name on sys.path).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

from config import celery_app

ROOT = Path(__file__).resolve().parents[2]

# Short, so a task lost with its worker comes back within seconds. Deferred triggers hop at half of it.
VISIBILITY_TIMEOUT_S = 3


def wait_until(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    log: Path | None = None,
) -> Any:
    """Poll until `predicate()` is truthy and return it; fail after `timeout` seconds, saying what."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            tail = f"\n--- worker log (tail) ---\n{log_tail(log)}" if log is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{tail}")
        time.sleep(interval)


def log_tail(path: Path | None, chars: int = 4000) -> str:
    if path is None or not path.exists():
        return "(no log)"
    return path.read_text(errors="replace")[-chars:]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# ---- the broker this process publishes to ------------------------------------------------------------


def broker_options() -> dict[str, Any]:
    return {
        "socket_connect_timeout": 2,
        "socket_timeout": 5,
        "visibility_timeout": VISIBILITY_TIMEOUT_S,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }


def _reset_celery_connections() -> None:
    # The app caches its broker pool, producer pool, queues and result backend on first use.
    celery_app._pool = None
    celery_app.__dict__.pop("amqp", None)
    celery_app._backend_cache = None
    with suppress(AttributeError):
        del celery_app._local.backend


@contextmanager
def celery_broker(url: str, queue: str, *, options: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Publish this process's tasks (lookups, callbacks, triggers) to `url`/`queue`, never eagerly.
    `options`: broker transport options instead of the tests' (`broker_options`)."""
    conf = celery_app.conf
    keys = ("broker_url", "task_default_queue", "broker_transport_options", "task_always_eager")
    saved = {key: conf[key] for key in keys}
    conf.update(
        broker_url=url,
        task_default_queue=queue,
        broker_transport_options=dict(options or broker_options()),
        task_always_eager=False,
    )
    _reset_celery_connections()
    try:
        yield
    finally:
        conf.update(saved)
        _reset_celery_connections()


def forget_queue(redis_url: str, queue: str) -> None:
    """Delete a queue that only this session used, with kombu's binding keys for it."""
    from redis import Redis

    with suppress(Exception):
        Redis.from_url(redis_url, socket_connect_timeout=2).delete(
            queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}"
        )


# ---- the worker --------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    # If the test process is killed outright, its worker must not outlive it (it would hold the test DB).
    with suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def database_url(settings_dict: Mapping[str, Any]) -> str:
    user = quote(settings_dict.get("USER") or "", safe="")
    password = quote(settings_dict.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{quote(settings_dict['NAME'], safe='')}"


@dataclass
class Worker:
    """`celery -A config worker` as a subprocess of the session; tests may kill and replace it."""

    env: dict[str, str]
    queue: str
    log_dir: Path
    concurrency: int = 3
    pool: str = "prefork"
    started: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    history: list[Path] = field(default_factory=list)

    def start(self, timeout: float = 45.0) -> None:
        assert self.proc is None or self.proc.poll() is not None, "a worker is already running"
        self.started += 1
        self.log = self.log_dir / f"worker-{self.started}.log"
        self.history.append(self.log)
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool",
            self.pool,
            "--concurrency",
            str(self.concurrency),
            "--queues",
            self.queue,
            "--hostname",
            f"{self.queue}-{self.started}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            "INFO",
        ]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                cmd,
                env=self.env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a kill takes its pool children with it
                preexec_fn=_die_with_parent,
            )
        proc, log = self.proc, self.log

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the worker exited with {proc.returncode}:\n{log_tail(log)}")
            return " ready." in log.read_text(errors="replace")

        wait_until(ready, timeout=timeout, what="the Celery worker to be ready", log=log)

    def pool_pids(self) -> list[int]:
        """The pool's child processes (prefork)."""
        assert self.proc is not None
        out = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True, check=False
        ).stdout
        return [int(pid) for pid in out.split()]

    def kill(self) -> None:
        """SIGKILL the worker and its pool at once: no warm shutdown, no acks, as when a machine dies."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 8.0) -> None:
        """Warm shutdown (unacked prefetched tasks go back to the queue), SIGKILL if it takes too long."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)
        # Whatever is left of the group (the main process, or pool children it left behind).
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


# ---- HTTP measures on loopback -----------------------------------------------------------------------


@dataclass
class Call:
    measure: str
    args: dict[str, Any]
    started: float  # time.monotonic() in this process
    started_at: datetime
    ended: float | None = None
    answered: bool = False


Behaviour = Callable[[dict[str, Any]], Any]


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: a frontier of 10 lookups connecting at once overflowed it,
    # and the kernel dropped a SYN now and then, which the client sends again only after 1 s.
    request_queue_size = 128


@dataclass(frozen=True)
class Observed:
    """A behaviour's answer with its own `observed_at` (by default the server stamps the time it answered)."""

    value: Any
    observed_at: datetime


class MeasureServer:
    """Answers `POST /` lookups as the design's HTTP measure contract says, recording when each call ran.

    A behaviour takes the lookup's args and returns the value (it may sleep or block); a measure without one
    answers 404, which the connector records as an error finding.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.behaviours: dict[str, Behaviour] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                call = Call(
                    body.get("measure", ""), body.get("args") or {}, time.monotonic(), datetime.now(UTC)
                )
                with outer.lock:
                    outer.calls.append(call)
                    behaviour = outer.behaviours.get(call.measure)
                status, answer = 404, {"error": f"no measure {call.measure!r}"}
                if behaviour is not None:
                    try:
                        value, observed_at = behaviour(call.args), datetime.now(UTC)
                        if isinstance(value, Observed):
                            value, observed_at = value.value, value.observed_at
                        status, answer = 200, {"value": value, "observed_at": observed_at.isoformat()}
                    except Exception as exc:
                        status, answer = 500, {"error": repr(exc)}
                call.ended = time.monotonic()
                raw = json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    call.answered = status == 200
                except OSError:
                    pass  # the caller is gone (a killed worker)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="measure-server", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()
            self.behaviours.clear()

    def answer(self, measure: str, behaviour: Behaviour, *, delay_s: float = 0.0) -> None:
        def run(args: dict[str, Any]) -> Any:
            if delay_s:
                time.sleep(delay_s)
            return behaviour(args)

        with self.lock:
            self.behaviours[measure] = run

    def calls_of(self, measure: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.measure == measure]


# ---- faults: a database that goes away, a scratch Redis, beat ----------------------------------------


def _admin_connection(settings_dict: Mapping[str, Any]) -> Any:
    """A psycopg connection to the server's maintenance database, outside Django (it must survive the test
    database going away)."""
    import psycopg

    return psycopg.connect(
        host=settings_dict.get("HOST") or "127.0.0.1",
        port=settings_dict.get("PORT") or 5432,
        user=settings_dict.get("USER") or None,
        password=settings_dict.get("PASSWORD") or None,
        dbname="postgres",
        autocommit=True,
        connect_timeout=5,
    )


class DatabaseOutage:
    """Takes this session's own test database away and gives it back: new connections are refused and the
    open ones are terminated, as when PostgreSQL restarts. Only that database: the shared server, and every
    other database on it, are untouched."""

    def __init__(self, settings_dict: Mapping[str, Any]) -> None:
        self.name = str(settings_dict["NAME"])
        self.settings_dict = settings_dict
        self.down_since: float | None = None

    def _sql(self, *statements: tuple[str, tuple[Any, ...]]) -> None:
        from psycopg import sql

        with _admin_connection(self.settings_dict) as conn:
            for statement, params in statements:
                conn.execute(sql.SQL(statement).format(db=sql.Identifier(self.name)), params)

    def start(self, *, spare: int | None = None) -> None:
        """`spare`: a backend pid to leave connected (this test process's own, when the fault is meant for
        the worker only)."""
        self.down_since = time.monotonic()
        self._sql(
            ("ALTER DATABASE {db} WITH ALLOW_CONNECTIONS false", ()),
            (
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid() AND pid IS DISTINCT FROM %s",
                (self.name, spare),
            ),
        )

    def stop(self) -> None:
        self._sql(("ALTER DATABASE {db} WITH ALLOW_CONNECTIONS true", ()))
        self.down_since = None

    def stop_after(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self.stop)
        timer.daemon = True
        timer.start()
        return timer


@contextmanager
def database_outage(settings_dict: Mapping[str, Any]) -> Iterator[DatabaseOutage]:
    """A DatabaseOutage that is always over when the block ends, whatever the test did."""
    outage = DatabaseOutage(settings_dict)
    try:
        yield outage
    finally:
        outage.stop()


class ScratchRedis:
    """A redis-server of the test's own on a free loopback port, to stop, freeze (SIGSTOP) and restart."""

    def __init__(self, directory: Path, args: Sequence[str] = ()) -> None:
        self.directory = directory
        self.port = closed_port()
        self.args = list(args)  # more redis-server options (persistence, say)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        from redis import Redis

        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                *self.args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        client = Redis.from_url(self.url, socket_connect_timeout=0.5, socket_timeout=0.5)
        wait_until(lambda: _pings(client), timeout=10, what="the scratch Redis to answer")

    def freeze(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.kill()
            self.proc.wait(timeout=10)

    def stop_graceful(self) -> None:
        """SIGTERM: Redis writes what it persists, then exits (a restart, not a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def _pings(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


@dataclass
class Beat:
    """`celery -A config beat` as a subprocess: the periodic sweep, as the Procfile runs it."""

    env: dict[str, str]
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def start(self) -> None:
        self.log = self.log_dir / "beat.log"
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            str(self.log_dir / "beat-schedule"),
            "--pidfile",
            "",
        ]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                cmd,
                env=self.env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=8)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
