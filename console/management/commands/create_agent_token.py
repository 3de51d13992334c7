from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.errors import BadInput
from console.services.tokens import agent_token_create


class Command(BaseCommand):
    help = "Create an agent API token and print it. Only its SHA-256 is stored: copy it now."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="who the token is for, e.g. the agent's name")
        parser.add_argument(
            "--principal",
            action="append",
            default=[],
            dest="principals",
            metavar="PRINCIPAL",
            help="a principal the token may act for, e.g. user:alice (repeatable; none given: any principal)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            _, token = agent_token_create(name=options["name"], principals=options["principals"])
        except BadInput as exc:
            raise CommandError(exc.detail) from None
        self.stdout.write(token)
