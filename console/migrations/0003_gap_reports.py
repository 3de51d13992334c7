# Hand-written: provider gap reports, and the time index the gap dashboards read first.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0002_review"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="gaprow",
            index=models.Index(fields=["created_at", "cls"], name="gaprow_created_cls"),
        ),
        migrations.CreateModel(
            name="GapReport",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("cls", models.CharField(max_length=30)),
                ("server", models.CharField(max_length=200)),
                ("tool", models.CharField(max_length=200)),
                ("contract_digest", models.CharField(blank=True, default="", max_length=80)),
                ("slot", models.CharField(max_length=500)),
                ("detail", models.TextField()),
                ("title", models.CharField(max_length=300)),
                ("notes", models.TextField(blank=True, default="")),
                ("evidence", models.JSONField(default=dict)),
                (
                    "status",
                    models.CharField(
                        choices=[("open", "open"), ("sent", "sent"), ("resolved", "resolved")],
                        default="open",
                        max_length=10,
                    ),
                ),
                ("history", models.JSONField(default=list)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["status", "-created_at"], name="gapreport_status_created"),
                    models.Index(fields=["server", "tool", "slot"], name="gapreport_tool_slot"),
                ],
            },
        ),
    ]
