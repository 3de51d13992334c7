"""The review console: HTML views for approvers, operators and auditors (htmx partials, no-JS fallback)."""
