"""The console as a bank would ship it: CSP without inline script, throttled sign-in, superuser-only admin,
on-site redirects, Secure cookies and HSTS when the deployment is behind TLS, an API docs page that stays
on this origin."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from review_support import person, signed_in

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]


def csp_of(response: Any) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {d.split()[0]: d.split()[1:] for d in (p.strip() for p in header.split(";")) if d}


@pytest.mark.parametrize("path", ["/accounts/login/", "/executions/", "/catalog/", "/audit/", "/api/docs/"])
def test_every_page_carries_a_policy_that_allows_no_inline_script(path: str) -> None:
    client = signed_in(User.objects.create_superuser("root"))

    response = client.get(path)

    policy = csp_of(response)
    assert policy["script-src"] == ["'self'"]
    assert (
        "'unsafe-inline'" not in policy.get("default-src", []) and "'unsafe-eval'" not in policy["script-src"]
    )
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert policy["img-src"] == ["'self'", "data:"]  # no image from another origin (a CDN logo)


def test_no_template_holds_inline_script_or_event_handlers() -> None:
    offenders = []
    for template in (REPO / "templates").rglob("*.html"):
        text = template.read_text()
        for tag in re.findall(r"<script\b[^>]*>", text):
            if "src=" not in tag:
                offenders.append(f"{template.name}: {tag}")
        offenders += [f"{template.name}: {m}" for m in re.findall(r"\son[a-z]+\s*=", text)]
        offenders += [f"{template.name}: javascript:" for _ in re.findall(r"javascript:", text)]
    assert offenders == []


def test_the_api_docs_page_links_back_and_fetches_nothing_from_another_origin(client: Client) -> None:
    html = client.get("/api/docs/").content.decode()

    assert 'href="/"' in html and "Back to the Preflight console" in html
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    bundle = (REPO / "static/vendor/redoc-2.5.4/bundles/redoc.standalone.js").read_text()
    assert "cdn.redoc.ly" not in bundle


def test_signing_out_lands_on_the_consoles_sign_in_page() -> None:
    client = signed_in(person("carol", "approver"))

    response = client.post("/accounts/logout/", follow=True)

    assert response.redirect_chain[-1][0] == "/accounts/login/"
    html = response.content.decode()
    assert "<h1>Sign in</h1>" in html and "Django" not in html and "admin" not in html.lower()


def test_django_admin_is_for_superusers_only() -> None:
    staff = User.objects.create_user("sam", is_staff=True, is_superuser=False)
    staff_client = signed_in(staff)
    root_client = signed_in(User.objects.create_superuser("root"))

    assert staff_client.get("/admin/").status_code == 302  # to the admin's sign-in: no access
    assert staff_client.get("/admin/auth/user/").status_code == 302
    assert root_client.get("/admin/").status_code == 200


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example/",
        "\\\\evil.example",
        "https:evil.example",
        "http://testserver@evil.example/",
        " //evil.example",
        "javascript:alert(1)",
        "///evil.example/",
        "/\t/evil.example/",
        "\x01//evil.example/",
        "https:/\\evil.example/",
        "http:\\\\evil.example",
        "//evil.example%2F@testserver/",
        "//evil。example/",
    ],
)
def test_signing_in_never_redirects_off_the_site(target: str) -> None:
    User.objects.create_user("dora", password="correct horse battery staple")
    client = Client()

    response = client.post(
        "/accounts/login/", {"username": "dora", "password": "correct horse battery staple", "next": target}
    )

    assert response.status_code == 302
    assert response["Location"] == "/"


def test_signing_in_follows_a_next_on_this_site() -> None:
    User.objects.create_user("dora", password="correct horse battery staple")

    response = Client().post(
        "/accounts/login/",
        {"username": "dora", "password": "correct horse battery staple", "next": "/executions/"},
    )

    assert response["Location"] == "/executions/"


def test_repeated_failed_sign_ins_pause_the_account_even_for_the_right_password(settings: Any) -> None:
    User.objects.create_user("dora", password="correct horse battery staple")
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert client.post("/accounts/login/", {"username": "dora", "password": "guess"}).status_code == 200
    assert client.post("/accounts/login/", {"username": "dora", "password": "guess"}).status_code == 429

    locked = client.post("/accounts/login/", {"username": "dora", "password": "correct horse battery staple"})

    assert locked.status_code == 429
    assert "Sign-in paused" in locked.content.decode()
    assert csp_of(locked)["script-src"] == ["'self'"]
    assert "_auth_user_id" not in client.session


def test_failures_from_one_address_pause_sign_in_for_other_usernames_too(settings: Any) -> None:
    User.objects.create_user("dora", password="correct horse battery staple")
    client = Client()
    for i in range(settings.AXES_FAILURE_LIMIT):
        client.post("/accounts/login/", {"username": f"spray{i}", "password": "guess"})

    locked = client.post("/accounts/login/", {"username": "dora", "password": "correct horse battery staple"})

    assert locked.status_code == 429


def test_behind_tls_requests_get_hsts_and_cookies_are_secure(settings: Any) -> None:
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    User.objects.create_user("dora", password="correct horse battery staple")
    client = Client(HTTP_X_FORWARDED_PROTO="https")

    page = client.get("/accounts/login/")
    signed = client.post("/accounts/login/", {"username": "dora", "password": "correct horse battery staple"})

    assert page["Strict-Transport-Security"] == "max-age=31536000"
    assert page.cookies["csrftoken"]["secure"] and page.cookies["csrftoken"]["httponly"]
    assert signed.cookies["sessionid"]["secure"] and signed.cookies["sessionid"]["httponly"]


def settings_under(env: dict[str, str], *names: str) -> list[Any]:
    code = (
        "import django; django.setup(); from django.conf import settings as s;"
        " print([getattr(s, n, None) for n in %r])"
    )
    base = {"DJANGO_SETTINGS_MODULE": "config.settings", "PREFLIGHT_DEBUG": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code % (names,)], env=base | env, capture_output=True, text=True, check=True
    )
    return list(ast.literal_eval(out.stdout))


def test_the_deployment_turns_on_secure_cookies_and_hsts_through_the_environment() -> None:
    names = ("SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_HSTS_SECONDS", "SECURE_PROXY_SSL_HEADER")

    assert settings_under({}, *names) == [False, False, 0, None]
    assert settings_under({"PREFLIGHT_SECURE_COOKIES": "true"}, *names) == [True, True, 0, None]
    assert settings_under({"PREFLIGHT_BEHIND_TLS": "true"}, *names) == [
        True,
        True,
        31_536_000,
        ("HTTP_X_FORWARDED_PROTO", "https"),
    ]
