"""Demo bookstore: ``order_book`` takes an ``isbn`` OR a ``title`` with its ``author`` (``oneOf`` of required
branches: only the user's own words may pick the branch), and ``find_book`` (read-only).

Run: ``python -m console.demo.bookstore`` (stdio).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from console.demo._server import DemoTool, Refused, demo_tools, main

SERVER = "bookstore"

# A book: its title, author and price.
BOOKS: dict[str, dict[str, Any]] = {
    "9780262033848": {"title": "Introduction to Algorithms", "author": "Cormen", "price": 98.0},
    "9780131103627": {"title": "The C Programming Language", "author": "Kernighan", "price": 52.0},
    "9781593279288": {"title": "Python Crash Course", "author": "Matthes", "price": 39.0},
}

EXTENSIONS: dict[str, dict[str, Any]] = {
    "order_book": {
        "state_change": "one copy of the book is ordered and charged to the user",
        "effects": ["order"],
    }
}

TOOL_SPECS: dict[str, dict[str, Any]] = {
    "order_book": {
        "name": "order_book",
        "description": "Order one copy of a book, by ISBN or by title and author.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "isbn": {"type": "string", "pattern": "^[0-9]{13}$"},
                "title": {"type": "string"},
                "author": {"type": "string"},
            },
            "oneOf": [{"required": ["isbn"]}, {"required": ["title", "author"]}],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    },
    "find_book": {
        "name": "find_book",
        "description": "Look a book up by a word of its title.",
        "inputSchema": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
        "annotations": {"readOnlyHint": True},
    },
}


def make_tools() -> Sequence[DemoTool]:
    orders: list[dict[str, Any]] = []

    def order_book(arguments: dict[str, Any]) -> dict[str, Any]:
        if "isbn" in arguments:
            isbn = arguments["isbn"]
            if isbn not in BOOKS:
                raise Refused(f"no book with ISBN {isbn}")
        else:
            found = [
                i
                for i, b in BOOKS.items()
                if b["title"].lower() == arguments["title"].lower()
                and b["author"].lower() == arguments["author"].lower()
            ]
            if not found:
                raise Refused(f"no book {arguments['title']!r} by {arguments['author']!r}")
            isbn = found[0]
        order = {"order_id": f"B{len(orders) + 1:04d}", "isbn": isbn, **BOOKS[isbn]}
        orders.append(order)
        return order

    def find_book(arguments: dict[str, Any]) -> dict[str, Any]:
        q = arguments["query"].lower()
        return {"books": [{"isbn": i, **b} for i, b in BOOKS.items() if q in b["title"].lower()]}

    return demo_tools(TOOL_SPECS, EXTENSIONS, order_book, find_book)


if __name__ == "__main__":
    main(SERVER, make_tools)
