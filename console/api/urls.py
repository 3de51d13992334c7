from django.urls import path, re_path

from console.api.catalog import CatalogImportView
from console.api.executions import (
    ExecutionAnswerView,
    ExecutionCreateView,
    ExecutionDetailView,
    ExecutionRunView,
)
from console.api.measures import MeasureCreateView
from console.api.presets import PresetListView, PresetRevokeView
from console.api.views import not_found

urlpatterns = [
    path("catalog/import", CatalogImportView.as_view(), name="api-catalog-import"),
    path("measures", MeasureCreateView.as_view(), name="api-measures"),
    path("executions", ExecutionCreateView.as_view(), name="api-executions"),
    path("executions/<uuid:execution_id>", ExecutionDetailView.as_view(), name="api-execution"),
    path(
        "executions/<uuid:execution_id>/answers", ExecutionAnswerView.as_view(), name="api-execution-answers"
    ),
    path("executions/<uuid:execution_id>/run", ExecutionRunView.as_view(), name="api-execution-run"),
    path("presets", PresetListView.as_view(), name="api-presets"),
    path("presets/<int:preset_id>", PresetRevokeView.as_view(), name="api-preset"),
    # Anything else under /api/v1/ answers in the API's error shape, not with an HTML page.
    re_path(r"^.*$", not_found),
]
