# Fewer indexes on the tables every preflight writes: no LIKE twin (varchar_pattern_ops, which PostgreSQL
# gets for a CharField with db_index=True or unique=True) where nothing filters with LIKE, and no index of
# its own for a foreign key that leads a composite index already. Same uniqueness, as constraints.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0004_agent_token_principals"),
    ]

    operations = [
        migrations.AlterField(
            model_name="execution",
            name="principal",
            field=models.CharField(max_length=200),
        ),
        migrations.AlterField(
            model_name="execution",
            name="verdict",
            field=models.CharField(max_length=10),
        ),
        migrations.AlterField(
            model_name="grant",
            name="nonce",
            field=models.CharField(max_length=100),
        ),
        migrations.AlterField(
            model_name="observation",
            name="execution",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="observations",
                to="console.execution",
            ),
        ),
        migrations.AlterField(
            model_name="observation",
            name="task_key",
            field=models.CharField(max_length=400),
        ),
        migrations.AlterField(
            model_name="preflightrecord",
            name="execution",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="preflight_records",
                to="console.execution",
            ),
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(fields=["principal"], name="execution_principal"),
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(fields=["verdict"], name="execution_verdict"),
        ),
        migrations.AddConstraint(
            model_name="grant",
            constraint=models.UniqueConstraint(fields=("nonce",), name="grant_nonce_unique"),
        ),
        migrations.AddConstraint(
            model_name="observation",
            constraint=models.UniqueConstraint(fields=("task_key",), name="observation_task_key_unique"),
        ),
    ]
