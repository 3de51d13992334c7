# Hand-written: what the review console needs from the models.
#
# - executions: the conversation key (parallel calls of one conversation are reviewed together), the time
#   of a reviewer's rejection, and the routes, gap classes and unknown count of the latest record (as the
#   verdict already is), with the partial index the held-executions queue reads and counts from alone;
# - records: the same summary of each record, read out of its JSON at insert; indexes for the audit history;
# - rejections: a reviewer's no with its reason, append-only.
#
# Rows written before this migration get the same values the models compute on insert (backfill below).

import hashlib
import json

import django.db.models.deletion
from django.apps.registry import Apps
from django.conf import settings
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def _conversation_key(principal: str, request: object) -> str:
    # Same as console.models.conversation_key; copied so the migration never changes with the model code.
    turns = request.get("conversation") if isinstance(request, dict) else None
    raw = json.dumps([principal, turns or []], sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(raw.encode()).hexdigest()


def _summary(record: object) -> tuple[str, str, int]:
    if not isinstance(record, dict):
        return "", "", 0
    slots = record.get("slots") or []
    routes = sorted({s["route"] for s in slots if s.get("status") == "unknown" and s.get("route")})
    gaps = sorted({g["class"] for g in record.get("gaps") or []})
    unknown = record.get("unknown_count")
    if not isinstance(unknown, int):
        unknown = sum(1 for s in slots if s.get("status") == "unknown")
    return (f" {' '.join(routes)} " if routes else ""), (f" {' '.join(gaps)} " if gaps else ""), unknown


def backfill(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # Queryset updates: these models refuse save() on existing rows (append-only), and none is needed.
    Execution = apps.get_model("console", "Execution")
    PreflightRecord = apps.get_model("console", "PreflightRecord")
    for pk, record in PreflightRecord.objects.values_list("pk", "record").iterator(500):
        routes, gaps, unknown = _summary(record)
        PreflightRecord.objects.filter(pk=pk).update(routes=routes, gap_classes=gaps, unknown_count=unknown)
    rows = Execution.objects.values_list("pk", "principal", "request", "records").iterator(500)
    for execution_pk, principal, request, seq in rows:
        latest = (
            PreflightRecord.objects.filter(execution_id=execution_pk, seq=seq)
            .values_list("record", flat=True)
            .first()
        )
        routes, gaps, unknown = _summary(latest)
        Execution.objects.filter(pk=execution_pk).update(
            conversation_key=_conversation_key(principal, request),
            routes=routes,
            gap_classes=gaps,
            unknown_count=unknown,
        )


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="conversation_key",
            field=models.CharField(blank=True, default="", max_length=80),
        ),
        migrations.AddField(
            model_name="execution",
            name="rejected_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="execution",
            name="routes",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="execution",
            name="gap_classes",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="execution",
            name="unknown_count",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="preflightrecord",
            name="routes",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="preflightrecord",
            name="gap_classes",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="preflightrecord",
            name="unknown_count",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(
                fields=["created_at", "id", "routes", "gap_classes", "contract", "conversation_key"],
                condition=models.Q(verdict__in=("hold", "ask", "measure")),
                name="execution_held_queue",
            ),
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(fields=["conversation_key", "created_at"], name="execution_conversation"),
        ),
        migrations.AddIndex(
            model_name="preflightrecord",
            index=models.Index(fields=["created_at"], name="record_created"),
        ),
        migrations.AddIndex(
            model_name="preflightrecord",
            index=models.Index(fields=["verdict", "created_at"], name="record_verdict_created"),
        ),
        migrations.CreateModel(
            name="Rejection",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("reason", models.TextField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "execution",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="rejection",
                        to="console.execution",
                    ),
                ),
                (
                    "record",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="console.preflightrecord",
                    ),
                ),
                (
                    "reviewer",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, to=settings.AUTH_USER_MODEL
                    ),
                ),
            ],
            options={"abstract": False},
        ),
    ]
