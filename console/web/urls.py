from django.urls import include, path

# Two areas, each owned by its own module: review (queue, review form, audit) and operator
# (catalog, rules, dashboards, provider-gap reports).
urlpatterns = [
    path("", include("console.web.review_urls")),
    path("", include("console.web.operator_urls")),
]
