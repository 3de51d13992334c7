from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def heads(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Each chain's head, from its last event."""
    AuditEvent = apps.get_model("console", "AuditEvent")
    AuditChain = apps.get_model("console", "AuditChain")
    for chain in AuditEvent.objects.values_list("chain", flat=True).distinct():
        seq, hash_ = AuditEvent.objects.filter(chain=chain).order_by("-seq").values_list("seq", "hash")[0]
        AuditChain.objects.create(chain=chain, seq=seq, hash=hash_)


class Migration(migrations.Migration):
    dependencies = [("console", "0013_queue_search_trigrams")]

    operations = [
        migrations.CreateModel(
            name="AuditChain",
            fields=[
                ("chain", models.PositiveSmallIntegerField(primary_key=True, serialize=False)),
                ("seq", models.PositiveBigIntegerField(default=0)),
                ("hash", models.CharField(max_length=80)),
            ],
        ),
        migrations.RunPython(heads, migrations.RunPython.noop),
    ]
