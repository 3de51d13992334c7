"""`manage.py grant_role`: creates the group and adds the user; refuses unknown users and roles."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


# ---- grant_role ---------------------------------------------------------------------------------------


def test_grant_role_creates_the_group_and_adds_the_user(db: None) -> None:
    user = User.objects.create_user("dora")
    out = StringIO()

    call_command("grant_role", "dora", "auditor", stdout=out)

    assert "dora: role auditor granted" in out.getvalue()
    assert list(user.groups.values_list("name", flat=True)) == ["auditor"]
    call_command("grant_role", "dora", "auditor", "--revoke", stdout=out)
    assert not user.groups.exists()
    assert Group.objects.filter(name="auditor").exists()


def test_grant_role_refuses_unknown_users_and_roles(db: None) -> None:
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("grant_role", "nobody", "approver")
    User.objects.create_user("dora")
    with pytest.raises(CommandError, match="invalid choice: 'admin'"):
        call_command("grant_role", "dora", "admin")
