from typing import Any

from csp.constants import UNSAFE_INLINE
from csp.decorators import csp_update
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView

from console import views


def _superusers_only(request: Any) -> bool:
    # Django's admin admits any staff user; here it edits tables beneath the audit chain, so superusers only.
    return bool(request.user.is_active and request.user.is_superuser)


admin.site.has_permission = _superusers_only  # type: ignore[method-assign]

# Redoc styles itself with generated <style> elements: the docs page alone allows inline styles, never script.
api_docs = csp_update({"style-src": [UNSAFE_INLINE], "worker-src": ["blob:"]})(
    SpectacularRedocView.as_view(url_name="api-schema")
)

urlpatterns = [
    path("", views.home, name="home"),
    path("health/", views.health, name="health"),
    path("health/live", views.live, name="health-live"),
    path("health/ready", views.ready, name="health-ready"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("console.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", api_docs, name="api-docs"),
    # The pages: review (queue, review form, audit) and operator (catalog, rules, dashboards, gap reports).
    path("", include("console.web.review_urls")),
    path("", include("console.web.operator_urls")),
]
