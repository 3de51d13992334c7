from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.errors import ServiceError
from console.services.tokens import operator_token_create


class Command(BaseCommand):
    help = (
        "Create an operator API token (catalog import, measures) for a console user with the operator role"
        " and print it. Only its SHA-256 is stored: copy it now. Revoking the user's role revokes the token."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="what the token is for, e.g. ci-catalog-sync")
        parser.add_argument("--user", required=True, dest="username", help="the operator it acts as")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            _, token = operator_token_create(name=options["name"], username=options["username"])
        except ServiceError as exc:
            raise CommandError(exc.detail) from None
        self.stdout.write(token)
