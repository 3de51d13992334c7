"""At phone width (390 px) the approver's and auditor's pages fit the screen: no sideways scrolling, no
text under 12 px, dashboard labels inside their charts. Screenshots go to artifacts/phone-*.png."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from console.demo import review_data
from console.services.catalog import catalog_import

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
DELETE_REPO = {
    "name": "delete_repo",
    "description": "Deletes a repository. Requires admin rights.",
    "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}}, "required": ["repo"]},
}

# Visible elements whose own text (not their children's) is smaller than 12 px.
SMALL_TEXT = """() => [...document.querySelectorAll('body *')].filter(el => {
  const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
  if (!own || !el.getClientRects().length) return false;
  const style = getComputedStyle(el);
  return style.visibility !== 'hidden' && parseFloat(style.fontSize) < 12;
}).map(el => el.tagName + ': ' + el.textContent.trim().slice(0, 40))"""

# The outermost elements that reach past the right edge: what to fix when a page scrolls sideways.
WIDE = """(edge) => [...document.querySelectorAll('body *')].filter(el =>
  el.getBoundingClientRect().right > edge + 1 && !(el.parentElement.getBoundingClientRect().right > edge + 1)
).map(el => el.tagName + '.' + [...el.classList].join('.')).slice(0, 5)"""

# SVG text drawn past the edge of its own chart (clipped on screen).
CLIPPED_LABELS = """() => [...document.querySelectorAll('svg text')].filter(t => {
  const svg = t.ownerSVGElement.getBoundingClientRect(), box = t.getBoundingClientRect();
  return box.width && (box.left < svg.left - 1 || box.right > svg.right + 1);
}).map(t => t.textContent.trim())"""


@pytest.fixture
def history() -> Any:
    review_data.register_bank()
    catalog_import(server="repo", tools=[DELETE_REPO], annotations_trusted=False, actor="test")
    execution = review_data.held_transfer()
    review_data.held_transfer(principal="user:bob", amount=75, memo=None)
    return execution


def test_every_console_page_fits_a_phone_without_sideways_scrolling(
    browser_page: Callable[..., Any], history: Any, screenshot: Callable[[Any, str], Path]
) -> None:
    page = browser_page(get_user_model().objects.create_superuser("root"))
    page.set_viewport_size(PHONE)
    pages = {
        "queue": "/executions/",
        "decided": "/executions/decided/",
        "review": f"/executions/{history.pk}/",
        "dashboards": "/dashboards/",
        "audit": "/audit/",
    }
    overflow, small, clipped = {}, {}, {}
    for name, path in pages.items():
        page.goto(path)
        page.wait_for_load_state("networkidle")
        screenshot(page, f"phone-{name}")
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > PHONE["width"]:
            overflow[name] = (width, page.evaluate(WIDE, PHONE["width"]))
        if found := page.evaluate(SMALL_TEXT):
            small[name] = found
        if found := page.evaluate(CLIPPED_LABELS):
            clipped[name] = found

    assert overflow == {}
    assert small == {}
    assert clipped == {}
