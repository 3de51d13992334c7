"""The home page (console/views.py)."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_home_page_says_what_the_console_is(client: Client) -> None:
    response = client.get("/")

    assert response.status_code == 200
    assert b"Preflight console" in response.content
    assert b"Approvers" in response.content


def test_home_page_loads_the_vendored_htmx(client: Client) -> None:
    response = client.get("/")

    assert b'src="/static/vendor/htmx-2.0.11.min.js"' in response.content
