from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.web.access import ROLES


class Command(BaseCommand):
    help = (
        "Give a console user a role (approver, operator or auditor; a Django group, created if missing). "
        "--revoke takes it away."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("role", choices=ROLES)
        parser.add_argument("--revoke", action="store_true", help="remove the role instead of granting it")

    def handle(self, *args: Any, username: str, role: str, revoke: bool, **options: Any) -> None:
        user_model = get_user_model()
        try:
            user = user_model.objects.get_by_natural_key(username)
        except user_model.DoesNotExist:
            # Roles are for people who sign in; creating an account here would create one without a password.
            raise CommandError(
                f"no user {username!r}: create it first (manage.py createsuperuser or the admin)"
            ) from None
        group, _ = Group.objects.get_or_create(name=role)
        if revoke:
            user.groups.remove(group)
            self.stdout.write(f"{username}: role {role} revoked")
        else:
            user.groups.add(group)
            self.stdout.write(f"{username}: role {role} granted")
