import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console import models
from console.errors import BadInput
from console.services.catalog import catalog_import
from preflight import ContractError, contract_from_mcp
from preflight.sidecars import Sidecar, load_sidecar


class Command(BaseCommand):
    help = (
        "Apply side-car files (sidecars/*.json by default) to the catalog: each server's tools are imported "
        "again with the side-car's x-preflight, which makes a new contract version of each changed tool. "
        "--catalog imports a tools/list file with the side-car (the server need not exist yet)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="*", type=Path, help="side-car files (default: sidecars/*.json)")
        parser.add_argument("--catalog", type=Path, help="a tools/list result to import with the side-car")
        parser.add_argument("--server", help="import under this server name instead of the side-car's")
        parser.add_argument("--actor", default="operator:load_sidecars", help="who is recorded in the audit")

    def handle(
        self,
        *args: Any,
        files: list[Path],
        catalog: Path | None,
        server: str | None,
        actor: str,
        **options: Any,
    ) -> None:
        paths = files or sorted((Path(settings.BASE_DIR) / "sidecars").glob("*.json"))
        if not paths:
            raise CommandError("no side-car files given, and none in sidecars/")
        if (catalog is not None or server is not None) and len(paths) != 1:
            raise CommandError("--catalog and --server apply to exactly one side-car file")
        for path in paths:
            try:
                sidecar = load_sidecar(path)
            except ContractError as exc:
                raise CommandError(f"{path}: {exc.reason}{f' at {exc.path}' if exc.path else ''}") from None
            self.apply(sidecar, server or sidecar.server, catalog, actor, path)

    def apply(self, sidecar: Sidecar, server: str, catalog: Path | None, actor: str, path: Path) -> None:
        srv = models.Server.objects.filter(name=server).first()
        if catalog is not None:
            tools = _catalog_tools(catalog)
        elif srv is None:
            self.stdout.write(f"{path.name}: server {server!r} is not in the catalog: skipped")
            return
        else:
            # The server's current catalog, as last imported: only the side-car's extensions change.
            tools = list(
                models.ToolContract.objects.filter(server=srv, current=True)
                .order_by("name")
                .values_list("definition", flat=True)
            )
        by_name = {t.get("name"): t for t in tools if isinstance(t, dict)}
        unknown = sorted(set(sidecar.tools) - set(by_name))
        if unknown:
            raise CommandError(f"{path.name}: no tool {', '.join(unknown)} on server {server!r}")
        # Checked before anything is imported: an invalid contract would retire the tool's working one.
        for name, extension in sidecar.tools.items():
            try:
                contract_from_mcp(server, by_name[name], extension=extension)
            except ContractError as exc:
                where = f" at {exc.path}" if exc.path else ""
                raise CommandError(
                    f"{path.name}: {name}: {exc.reason}{where}; nothing was imported"
                ) from None
        try:
            result = catalog_import(
                server=server,
                tools=tools,
                annotations_trusted=srv.annotations_trusted if srv is not None else False,
                actor=actor,
                extensions=sidecar.tools,
            )
        except BadInput as exc:
            raise CommandError(f"{path.name}: {exc.detail}") from None
        for tool in result.tools:
            gaps = [p for p in tool.problems if p.get("class") == "provider_gap"]
            state = f"{len(gaps)} provider gap(s)" if gaps else "no provider gap"
            self.stdout.write(f"{server}/{tool.name}: {tool.version}, {state}")


def _catalog_tools(path: Path) -> list[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CommandError(f"{path}: cannot read the catalog: {exc}") from None
    tools = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(tools, list):
        raise CommandError(f"{path}: a catalog is a tools/list result, an object with a list of tools")
    return tools
