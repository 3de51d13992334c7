import os

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Preflight console"

    def ready(self) -> None:
        # `make demo` runs the demo bank and shop in-process, so the gate and the lookups of the web
        # process can reach them; everywhere else connectors are configured per server.
        if os.environ.get("PREFLIGHT_DEMO") == "1":
            from console.demo import inprocess

            inprocess.register()
