"""A griffe extension that shows the docstrings' Sphinx cross-reference roles as inline code.

The package's docstrings name other objects with Sphinx roles (``:class:`NodePool```,
``:meth:`~InferenceCluster.namespace```), which Markdown would print as they are written. The
API reference shows each as the name it refers to, in code: ``~`` keeps the last component
only, as Sphinx does, and an explicit title (``:func:`title <target>```) is shown instead of
the target. The names stay code rather than links because a role may name an object the
reference does not document (a private module, a constant), which would fail the strict build.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_ROLE = re.compile(r":(?:py:)?(?:attr|class|data|exc|func|meth|mod|obj):`([^`]+)`")
_TITLED = re.compile(r"(.+?)\s*<[^>]+>")


def _shown(match: re.Match[str]) -> str:
    target = match.group(1)
    titled = _TITLED.fullmatch(target)
    if titled:
        return f"`{titled.group(1)}`"
    if target.startswith("~"):
        return f"`{target[1:].rsplit('.', 1)[-1]}`"
    return f"`{target}`"


class SphinxRoles(Extension):
    """Rewrites each object's docstring before mkdocstrings parses it."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_shown, obj.docstring.value)
