"""Operator area: dashboards (operators and auditors), provider gap reports, catalog and rules."""

from django.urls import include, path

from console.web import dashboards, operator

app_name = "operator"

server = [
    path("", operator.server_detail, name="server"),
    path("trust/", operator.server_trust, name="server-trust"),
    path("review-policy/", operator.server_review_policy, name="server-review-policy"),
    path("sidecar.json", operator.server_sidecar_export, name="server-sidecar-export"),
    path("sidecar/import/", operator.server_sidecar_import, name="server-sidecar-import"),
]

urlpatterns = [
    path("dashboards/", dashboards.index, name="dashboards"),
    path("gap-reports/", operator.gap_reports, name="gap-reports"),
    path("gap-reports/new/", operator.gap_report_new, name="gap-report-new"),
    path("gap-reports/<int:pk>/", operator.gap_report_detail, name="gap-report"),
    path("gap-reports/<int:pk>/status/", operator.gap_report_status, name="gap-report-status"),
    path("gap-reports/<int:pk>/export.<str:fmt>", operator.gap_report_export, name="gap-report-export"),
    path("catalog/", operator.catalog, name="catalog"),
    path("catalog/import/", operator.catalog_import, name="catalog-import"),
    path("catalog/import/mcp/", operator.catalog_import_mcp, name="catalog-import-mcp"),
    path("catalog/servers/<int:pk>/", include(server)),
    path("catalog/contracts/<int:pk>/", operator.contract_detail, name="contract"),
    path("catalog/contracts/<int:pk>/diff/<int:other>/", operator.contract_diff, name="contract-diff"),
    path("catalog/contracts/<int:pk>/sidecar/", operator.contract_sidecar, name="contract-sidecar"),
    path("catalog/sidecar/", operator.tool_sidecar, name="tool-sidecar"),
    path("rules/", operator.rules, name="rules"),
    path("rules/new/", operator.rules_edit, name="rules-new"),
    path("rules/<str:name>/edit/", operator.rules_edit, name="rules-edit"),
]
