"""What the console's filter forms share: server and tool chosen from the catalog, and how a form's errors
are said."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from console import models


class CatalogFilter(forms.Form):
    """A filter form whose first two fields pick a server and a tool of the catalog."""

    server = forms.ChoiceField(required=False)
    tool = forms.ChoiceField(required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The catalog's names, not free text: a filter can only name something that exists.
        servers = models.Server.objects.order_by("name").values_list("name", flat=True)
        tools = models.ToolContract.objects.order_by("name").values_list("name", flat=True).distinct()
        # The fields declared above: Form.fields is typed as holding any Field.
        server, tool = cast(tuple[forms.ChoiceField, ...], (self.fields["server"], self.fields["tool"]))
        server.choices = [("", "any server"), *((s, s) for s in servers)]
        tool.choices = [("", "any tool"), *((t, t) for t in tools)]


def form_problems(form: forms.Form) -> list[str]:
    """Each invalid field and why, as the pages say it (instead of listing or exporting everything, or as
    messages beside a review form)."""
    return [f"{name}: {' '.join(map(str, errors))}" for name, errors in form.errors.items()]
