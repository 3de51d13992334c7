"""The migrations describe the models: a model change without its migration would ship a schema that is not
the one the code expects (0002 and 0003 were written by hand, so this is checked, not assumed)."""

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db  # makemigrations checks the applied history against the files
def test_the_models_need_no_migration_that_is_not_committed() -> None:
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exc:  # --check exits 1 when a migration is missing
        pytest.fail(f"models and migrations disagree (exit {exc.code}):\n{out.getvalue()}")
    assert "No changes detected" in out.getvalue()
