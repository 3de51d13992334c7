"""Data for the operator page tests: users with roles, and executions whose records carry gaps."""

from __future__ import annotations

from typing import Any

from console_helpers import ALICE_MAIN, BOB, GET_BALANCE, TRANSFER, said, transfer_request
from django.contrib.auth.models import Group, User

from console import models
from console.services.catalog import catalog_import
from console.services.executions import execution_create
from console.services.measures import measure_create

PASSWORD = "a-long-test-password-1"

# A tool whose description states a condition in prose only, and that declares no state change:
# every call of it has provider gaps (cond:prose-1, fixed:intended_change).
DELETE_REPO: dict[str, Any] = {
    "name": "delete_repo",
    "description": "Deletes a repository. Requires admin rights.",
    "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}}, "required": ["repo"]},
}
# No inputSchema at all: a provider gap on schema:# (a missing schema is not a tool without arguments).
LEGACY_PURGE: dict[str, Any] = {
    "name": "purge_cache",
    "description": "Purges the cache.",
    "x-preflight": {"state_change": "the cache is emptied"},
}


def user_with(username: str, *roles: str, superuser: bool = False) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_superuser=superuser)
    for role in roles:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


def import_catalog() -> None:
    catalog_import(
        server="bank",
        tools=[TRANSFER, GET_BALANCE],
        annotations_trusted=True,
        connector={"kind": "python"},
        actor="test",
    )
    catalog_import(server="repo", tools=[DELETE_REPO, LEGACY_PURGE], annotations_trusted=False, actor="test")
    measure_create(name="bank.balance", kind="python", timeout_s=2, actor="test")


def delete_repo_request(repo: str = "acme/web", principal: str = "user:carol") -> dict[str, Any]:
    text = f"Delete the repository {repo} now."
    return said("repo", "delete_repo", text, {"repo": repo}, action="Delete", principal=principal)


def purge_request() -> dict[str, Any]:
    return said("repo", "purge_cache", "Purge the cache now.", {}, action="Purge", principal="user:carol")


def make_gaps(*, provider: int = 3, user: int = 2, purge: int = 1) -> list[models.Execution]:
    """Executions with provider gaps (delete_repo, purge_cache) and user gaps (transfers with no source)."""
    out = []
    for i in range(provider):
        out.append(execution_create(body=delete_repo_request(f"acme/repo{i}"), token=None, actor="test"))
    for _ in range(purge):
        out.append(execution_create(body=purge_request(), token=None, actor="test"))
    for _ in range(user):
        body = transfer_request(from_account=None, to_account=BOB)
        out.append(execution_create(body=body, token=None, actor="test"))
    return out


__all__ = ["ALICE_MAIN", "PASSWORD", "import_catalog", "make_gaps", "user_with"]
