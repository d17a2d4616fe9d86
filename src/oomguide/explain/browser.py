"""The site's paste box: ``oomguide explain`` in the reader's browser, run by Pyodide.

What it does: answers one pasted message exactly as ``oomguide explain --lang LANG -`` answers it
when the message comes on stdin (``command.run`` without a config: ``explain`` and then ``render``),
with the guide's links relative to the page the box is on (``base``: the way from that page to the
site's root, as MkDocs writes it, e.g. ``../..``), through ``OOMGUIDE_SITE_URL``, the links' one
override. Input it cannot read gives the CLI's error line, which names the pasted text where the CLI names
stdin. The site's build packs this module
with the rest of the torch-free package (``site_hooks.browser_bundle``); ``docs/assets/paste.js``
loads Pyodide, that bundle, and calls :func:`answer`.

It must never parse, diagnose or word anything itself (that is ``formats``, ``diagnosis`` and
``render``), nor import anything beyond what explaining a message without a config imports.
"""

from __future__ import annotations

import json
import os

from ..check_render import error_line
from .diagnosis import explain
from .formats import ExplainError
from .links import SITE_URL_ENV, section_link
from .render import render

SOURCE = "the pasted text"  # what the one-line errors call the message (the CLI: "stdin" or the file)


def answer(text: str, lang: str, base: str) -> str:
    """JSON: ``{"text": the CLI's output, "links": the sections' addresses in it}`` or ``{"error": line}``."""
    before = os.environ.get(SITE_URL_ENV)
    os.environ[SITE_URL_ENV] = base
    try:
        result = explain(text, None, source=SOURCE)
        out = {
            "text": render(result, lang),
            "links": [section_link(page, anchor, lang) for page, anchor in result.sections],
        }
    except (ExplainError, ValueError) as exc:  # the CLI's bad input (cli._main): one line
        out = {"error": error_line("explain", str(exc), lang)}
    finally:
        if before is None:
            del os.environ[SITE_URL_ENV]
        else:
            os.environ[SITE_URL_ENV] = before
    return json.dumps(out, ensure_ascii=False)
