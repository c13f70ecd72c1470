"""The single jinja2 environment of the renderer: it fills string fields, never YAML.

Templates here produce one string value (a shell script, a command line) that a builder
puts into a field of an object; the YAML text itself is always written by `emit`.
Undefined variables are errors (`StrictUndefined`) and nothing is HTML-escaped.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2


@functools.cache
def environment() -> jinja2.Environment:
    """The environment, made on first use: a render without templates never imports jinja2."""
    import jinja2  # imported here: start-up of `kuberay render` (bench/startup.py)

    return jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # shell text, not HTML
        keep_trailing_newline=True,
    )


@functools.lru_cache(maxsize=64)
def _compile(template: str) -> jinja2.Template:
    # Compiling costs far more than rendering; the renderer uses a handful of fixed templates.
    return environment().from_string(template)


def render_string(template: str, context: Mapping[str, object]) -> str:
    """Render `template` with `context`; an undefined name raises `jinja2.UndefinedError`."""
    return _compile(template).render(context)
