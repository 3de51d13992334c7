from django.db import migrations


class Migration(migrations.Migration):
    """Models of the review console (filled in by the review work)."""

    dependencies = [("console", "0001_initial")]
    operations: list[migrations.operations.base.Operation] = []
