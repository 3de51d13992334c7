"""Services a bench starts for itself: a PostgreSQL cluster of its own (initdb + pg_ctl in a temporary
directory, on a free loopback port), to stop, restart and kill without touching the machine's shared one.

As root, the cluster's programs run as the `postgres` user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise SystemExit(f"no PostgreSQL {name} under /usr/lib/postgresql/*/bin")
    return found[-1]


class ScratchPostgres:
    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="preflight-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.settings = settings or {}
        self.user = "postgres" if os.geteuid() == 0 else None

    def _run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        full = ["runuser", "-u", self.user, "--", *cmd] if self.user else list(cmd)
        return subprocess.run(full, check=check, capture_output=True, timeout=120)

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/bench"

    def create(self) -> None:
        if self.user:
            info = pwd.getpwnam(self.user)
            os.chown(self.dir, info.pw_uid, info.pw_gid)
        self._run(_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()
        self._run(_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "bench")

    def start(self) -> None:
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.dir}",
                "-c max_connections=200",
                *(f"-c {k}={v}" for k, v in self.settings.items()),
            ]
        )
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def ready(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            probe = self._run(_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), check=False)
            if probe.returncode == 0:
                return
            time.sleep(0.1)
        raise SystemExit(f"scratch PostgreSQL did not come up:\n{self.log.read_text()[-2000:]}")

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
