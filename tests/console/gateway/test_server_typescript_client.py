"""The gateway over real stdio, driven by the TypeScript SDK's client (npm @modelcontextprotocol/sdk, a
2025-11-25 client), in front of the real filesystem server."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection

from console import connectors, models, storage
from console.services.catalog import catalog_import
from console.services.review import execution_approve

from .conftest import FS_EXTENSIONS, JS, REPO

CONTENT = "Written through the TypeScript client.\n"


def ts_client(env: dict[str, str], argv: list[str], **scenario: Any) -> dict[str, Any]:
    node = shutil.which("node") or "node"
    spec = {"command": argv[0], "args": argv[1:], "env": env, "cwd": str(REPO), **scenario}
    done = subprocess.run(
        [node, str(JS / "client.mjs"), json.dumps(spec)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def text_of(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


def test_tools_list_equals_the_upstream_listing(
    fs_catalog: Any, filesystem: Any, gateway_env: dict[str, str], gateway_argv: list[str]
) -> None:
    direct = ts_client(gateway_env, filesystem.command)
    fronted = ts_client(gateway_env, gateway_argv)
    assert fronted["tools"] == direct["tools"]
    assert len(fronted["tools"]) == 14


def test_a_trusted_read_text_file_returns_the_file(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str]
) -> None:
    note = scratch / "note.txt"
    note.write_text("from disk\n")
    out = ts_client(gateway_env, gateway_argv, tool="read_text_file", arguments={"path": str(note)})
    assert not out["result"].get("isError")
    assert text_of(out["result"]) == "from disk\n"
    assert out["asked"] == []


def test_write_file_without_content_is_one_form_and_the_file_holds_the_answer(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str]
) -> None:
    target = scratch / "diary.txt"
    out = ts_client(
        gateway_env,
        gateway_argv,
        tool="write_file",
        arguments={"path": str(target)},
        answers={"arg:content": CONTENT},
    )
    assert not out["result"].get("isError"), out["result"]
    assert [a.get("mode", "form") for a in out["asked"]] == ["form"]
    assert target.read_bytes() == CONTENT.encode()
    assert models.Outcome.objects.filter(status="executed").count() == 1


def test_a_decline_writes_nothing(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str]
) -> None:
    target = scratch / "diary.txt"
    out = ts_client(
        gateway_env, gateway_argv, tool="write_file", arguments={"path": str(target)}, action="decline"
    )
    assert out["result"]["isError"]
    assert not target.exists()
    assert models.Outcome.objects.count() == 0


def test_move_file_is_held_by_url_and_moves_only_after_approval(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str], tmp_path: Path
) -> None:
    source, destination = scratch / "draft.txt", scratch / "final.txt"
    source.write_text("draft\n")
    asked, approved = tmp_path / "asked", tmp_path / "approved"
    approver = get_user_model().objects.create_user("bea", password="x")
    seen: dict[str, Any] = {}

    def approve_when_held() -> None:
        deadline = time.monotonic() + 90
        try:
            while time.monotonic() < deadline:
                # The approver acts once the user was sent to the page, as in life.
                execution = (
                    models.Execution.objects.filter(verdict="hold").first() if asked.exists() else None
                )
                if execution is not None:
                    seen["before"] = (source.exists(), destination.exists())
                    seen["console_url"] = storage.record_answer(execution)["console_url"]
                    latest = storage.latest_record(execution)
                    execution_approve(
                        execution_id=execution.pk,
                        payload_digest_seen=latest.payload_digest,
                        approver=approver,
                    )
                    approved.touch()
                    return
                time.sleep(0.1)
        finally:
            connection.close()

    reviewer = threading.Thread(target=approve_when_held)
    reviewer.start()
    out = ts_client(
        gateway_env,
        gateway_argv,
        tool="move_file",
        arguments={"source": str(source), "destination": str(destination)},
        wait_for=str(approved),
        asked_file=str(asked),
    )
    reviewer.join()
    assert not out["result"].get("isError"), out["result"]
    modes = [a.get("mode", "form") for a in out["asked"]]
    assert modes == ["form", "url"]
    assert out["asked"][1]["url"].endswith(seen["console_url"])
    assert seen["before"] == (True, False)
    assert destination.read_text() == "draft\n" and not source.exists()


def test_a_client_without_url_mode_gets_an_error_carrying_the_review_url(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str]
) -> None:
    source, destination = scratch / "draft.txt", scratch / "final.txt"
    source.write_text("draft\n")
    out = ts_client(
        gateway_env,
        gateway_argv,
        tool="move_file",
        arguments={"source": str(source), "destination": str(destination)},
        elicitation={"form": {}},
    )
    assert out["result"]["isError"]
    execution = models.Execution.objects.get()
    assert f"http://console.test/executions/{execution.pk}/" in text_of(out["result"])
    assert source.exists() and not destination.exists()


def test_a_client_without_elicitation_gets_a_clear_error(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str]
) -> None:
    target = scratch / "diary.txt"
    out = ts_client(
        gateway_env, gateway_argv, tool="write_file", arguments={"path": str(target)}, elicitation=None
    )
    assert out["result"]["isError"]
    assert "no form elicitation capability" in text_of(out["result"])
    assert not target.exists()


def test_an_upstream_definition_changed_after_import_is_refused_before_sending(
    transactional_db: None,
    filesystem: Any,
    scratch: Path,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
) -> None:
    live = connectors.list_tools(filesystem.connector, timeout_s=30)
    # What the operator approved said something else: the live description is not the pinned one.
    approved = [
        {**t, "description": "Create a file. Never overwrites anything."} if t["name"] == "write_file" else t
        for t in live
    ]
    catalog_import(
        server="fs",
        tools=approved,
        annotations_trusted=True,
        connector=filesystem.connector,
        actor="user:operator",
        extensions=FS_EXTENSIONS,
    )
    target = scratch / "diary.txt"
    out = ts_client(
        gateway_env,
        gateway_argv,
        tool="write_file",
        arguments={"path": str(target), "content": CONTENT},
        answers={"arg:content": CONTENT},
    )
    assert out["result"]["isError"]
    assert "definition changed" in text_of(out["result"])
    assert out["asked"] == []
    assert not target.exists()
    assert models.Outcome.objects.count() == 0
    assert models.Execution.objects.get().verdict == "block"
