"""`manage.py demo` (what `make demo` runs) from a clean checkout: it loads the demo through the gateway,
serves the console and the gateway, the queue opens on every route and the history on every verdict (the
smart home's choice between providers, the deferred order and the lookup in flight among them, all through
the gateway), and
Ctrl-C stops everything."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ROUTES = ("ask_user", "measure", "hold", "provider_gap", "unsupported")
VERDICTS = ("execute", "ask", "measure", "hold", "block", "deferred")


def signed_in(base: str, user: str, password: str) -> urllib.request.OpenerDirector:
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    browser.open(f"{base}/accounts/login/").read()
    token = next(c.value for c in jar if c.name == "csrftoken")
    form = urllib.parse.urlencode({"username": user, "password": password, "csrfmiddlewaretoken": token})
    request = urllib.request.Request(f"{base}/accounts/login/", data=form.encode(), headers={"Referer": base})
    browser.open(request).read()
    return browser


def through_gateway(base: str, token: str, printed: str, scenario: str) -> dict[str, Any]:
    """The Agent API's view, for the demo agent's token, of the execution the scripted agent reported for
    the scenario (the line names the scenario and ends with its console URL)."""
    line = next(line for line in printed.splitlines() if scenario in line and "/executions/" in line)
    execution_id = re.search(r"/executions/([0-9a-f-]{36})/\s*$", line)
    assert execution_id is not None, line
    request = urllib.request.Request(
        f"{base}/api/v1/executions/{execution_id.group(1)}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request) as response:
        return dict(json.loads(response.read()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def test_the_demo_starts_from_a_clean_checkout_shows_every_route_and_stops_cleanly(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(REPO), str(checkout)], check=True)
    assert not (checkout / "var").exists()
    ports = {"--port": free_port(), "--gateway-port": free_port(), "--bank-port": free_port()}
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "PREFLIGHT_SECRET_KEY")
    }
    log = open(tmp_path / "demo.log", "w+")  # noqa: SIM115 - read after the process ends
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", *(str(x) for kv in ports.items() for x in kv)],
        cwd=checkout,
        env={**env, "PREFLIGHT_DEMO": "1"},
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 240
        while "Ctrl-C stops the demo" not in (tmp_path / "demo.log").read_text():
            assert demo.poll() is None, (tmp_path / "demo.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "the demo did not come up"
            time.sleep(0.5)
        printed = (tmp_path / "demo.log").read_text()
        base = f"http://127.0.0.1:{ports['--port']}"
        assert f"Preflight demo: {base}/" in printed
        for user in ("requester", "approver", "operator", "auditor"):
            assert re.search(rf"^\s+{user}\s+password \S+", printed, re.MULTILINE), user
        assert '"mcpServers"' in printed and "mcp_gateway" in printed

        browser = signed_in(base, "approver", "demo-approver")
        queue = browser.open(f"{base}/executions/").read().decode()
        for route in ROUTES:
            count = re.search(rf'data-route="{route}">{route} <strong>(\d+)</strong>', queue)
            assert count is not None and int(count.group(1)) >= 1, route
        # Every verdict is in the auditor's history of records.
        auditor = signed_in(base, "auditor", "demo-auditor")
        for verdict in VERDICTS:
            history = auditor.open(f"{base}/audit/?verdict={verdict}").read().decode()
            assert f'class="verdict verdict-{verdict}">{verdict}<' in history, verdict
        # The smart home, the deferred order and the lookup in flight went through the gateway: their
        # executions are the demo agent token's (the Agent API shows one only to the token that submitted it).
        agent_token = (checkout / "var" / "demo-agent-token").read_text().strip()
        lights_off = through_gateway(base, agent_token, printed, "lights off")
        assert (lights_off["verdict"], lights_off["outcome"]) == ("execute", "executed")
        # Of the two providers that can, the user picked homebase; the one merely named so did not run.
        assert (lights_off["server"], lights_off["tool"]) == ("home-homebase", "switch_room_off")
        deferred = through_gateway(base, agent_token, printed, "an order for tomorrow")
        assert deferred["verdict"] == "deferred" and deferred["timing_at"]
        in_flight = through_gateway(base, agent_token, printed, "a balance lookup still in flight")
        assert in_flight["verdict"] == "measure"
        assert answers(ports["--gateway-port"]) and answers(ports["--bank-port"])
    finally:
        demo.send_signal(signal.SIGINT)
        code = demo.wait(timeout=60)
    assert code == 0, (tmp_path / "demo.log").read_text()[-4000:]
    for port in ports.values():
        assert not answers(port), f"port {port} still answers after the demo stopped"
