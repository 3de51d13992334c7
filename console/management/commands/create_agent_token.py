from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from console.services import agent_token_create


class Command(BaseCommand):
    help = "Create an agent API token and print it. Only its SHA-256 is stored: copy it now."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="who the token is for, e.g. the agent's name")

    def handle(self, *args: Any, **options: Any) -> None:
        _, token = agent_token_create(name=options["name"])
        self.stdout.write(token)
