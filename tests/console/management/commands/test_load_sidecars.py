"""`manage.py load_sidecars`: the side-car files kept in the repository become contract versions."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from console import models
from console.services.catalog import catalog_import

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[4]
FILESYSTEM_SIDECAR = REPO / "sidecars" / "mcp-server-filesystem.json"
FILESYSTEM_CATALOG = REPO.parent / "shared" / "catalogs" / "mcp-server-filesystem.json"
needs_catalog = pytest.mark.skipif(not FILESYSTEM_CATALOG.exists(), reason=f"no {FILESYSTEM_CATALOG}")


def _provider_gaps(server: str) -> dict[str, list[str]]:
    rows = models.ToolContract.objects.filter(server__name=server, current=True)
    return {r.name: [p["slot"] for p in r.problems if p["class"] == "provider_gap"] for r in rows}


def _import_filesystem() -> list[dict[str, Any]]:
    tools = json.loads(FILESYSTEM_CATALOG.read_text(encoding="utf-8"))["tools"]
    catalog_import(server="mcp-server-filesystem", tools=tools, annotations_trusted=False, actor="t")
    return list(tools)


@needs_catalog
def test_loading_the_filesystem_side_car_leaves_no_tool_of_that_catalog_with_a_provider_gap() -> None:
    tools = _import_filesystem()
    before = _provider_gaps("mcp-server-filesystem")
    assert len(before) == len(tools) and all(before.values())

    out = StringIO()
    call_command("load_sidecars", str(FILESYSTEM_SIDECAR), stdout=out)

    assert _provider_gaps("mcp-server-filesystem") == {t["name"]: [] for t in tools}
    write_file = models.ToolContract.objects.get(
        server__name="mcp-server-filesystem", name="write_file", current=True
    )
    assert write_file.definition["x-preflight"]["slots"]["path"]["confirm"] is True
    assert "mcp-server-filesystem/write_file: new, no provider gap" in out.getvalue()
    # the earlier version stays, so records made under it keep their contract
    assert (
        models.ToolContract.objects.filter(server__name="mcp-server-filesystem", name="write_file").count()
        == 2
    )
    audit = models.AuditEvent.objects.filter(kind="catalog_import").order_by("-seq").first()
    assert audit is not None and audit.body["actor"] == "operator:load_sidecars"


@needs_catalog
def test_the_side_car_can_come_with_its_catalog_under_another_server_name() -> None:
    call_command(
        "load_sidecars",
        str(FILESYSTEM_SIDECAR),
        "--catalog",
        str(FILESYSTEM_CATALOG),
        "--server",
        "fs",
        stdout=StringIO(),
    )
    gaps = _provider_gaps("fs")
    assert len(gaps) == 14 and not any(gaps.values())


@needs_catalog
def test_loading_the_same_side_car_twice_changes_nothing() -> None:
    _import_filesystem()
    call_command("load_sidecars", str(FILESYSTEM_SIDECAR), stdout=StringIO())
    versions = models.ToolContract.objects.count()
    out = StringIO()
    call_command("load_sidecars", str(FILESYSTEM_SIDECAR), stdout=out)
    assert models.ToolContract.objects.count() == versions
    assert "new" not in out.getvalue().replace("no provider gap", "")


@needs_catalog
def test_a_side_car_with_an_invalid_extension_is_refused_and_imports_nothing(tmp_path: Path) -> None:
    _import_filesystem()
    before = list(models.ToolContract.objects.values_list("pk", "current"))
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"server": "mcp-server-filesystem", "tools": {"write_file": {"slots": {"nope": {}}}}}),
        encoding="utf-8",
    )
    with pytest.raises(CommandError, match="not an argument"):
        call_command("load_sidecars", str(bad), stdout=StringIO())
    assert list(models.ToolContract.objects.values_list("pk", "current")) == before


@pytest.mark.parametrize(
    "content",
    ["{not json", json.dumps({"server": "x"}), json.dumps({"server": "bank", "tools": {"no_such_tool": {}}})],
    ids=["not-json", "not-a-side-car", "unknown-tool"],
)
def test_a_malformed_side_car_file_is_a_command_error_naming_it(
    tmp_path: Path, content: str, quick_bank: Any
) -> None:
    path = tmp_path / "broken.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CommandError, match=r"broken\.json"):
        call_command("load_sidecars", str(path), stdout=StringIO())
