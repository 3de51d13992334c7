"""The API schema and docs routes of config/urls.py."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_api_schema_is_openapi_3(client: Client) -> None:
    response = client.get("/api/schema/", {"format": "json"})

    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")


def test_api_docs_load_redoc_from_our_own_static_files(client: Client) -> None:
    response = client.get("/api/docs/")

    assert response.status_code == 200
    assert b"/static/vendor/redoc-2.5.4/bundles/redoc.standalone.js" in response.content
    # Anything fetched from another host breaks the docs on a machine without internet.
    assert b"https://" not in response.content
