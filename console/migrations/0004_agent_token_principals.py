# Agent tokens restricted to principals. Existing tokens get [] (any principal), as they behaved before.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0003_gap_reports"),
    ]

    operations = [
        migrations.AddField(
            model_name="agenttoken",
            name="principals",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
