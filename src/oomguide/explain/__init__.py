"""``oomguide explain``: read a PyTorch CUDA out-of-memory message and explain it.

The package, one module per job, in the order the answer is built:

- ``formats``    the messages PyTorch prints, one parser per format (with the versions that print
                 it), and sizes as PyTorch's ``format_size`` writes them
- ``tensors``    which tensor the request was: a config's large tensors, or a search of logits sizes
- ``diagnosis``  why it ran out, the prediction of each phase, the sections to read (as data)
- ``links``      the guide's sections: their titles in the reader's language, and the published
                 site's address (mkdocs.yml's ``site_url``), else the page's installed file
- ``words``      every English sentence explain prints, the message ids of its catalogs
- ``render``     the answer as text in one of five languages (catalogs: ``oomguide.i18n``)
- ``command``    the command line: arguments, input, output

Where to add a message format, a sentence or a translation: CONTRIBUTING.md. This file only names
what the CLI, the tests and the notebook use; it must never hold logic of its own. Nothing in the
package touches a GPU; predictions come from ``oomguide.memory``. Reading a message, naming its
tensor, the diagnosis and the answer import neither torch nor numpy (tests/test_explain.py checks it
in a fresh interpreter): ``oomguide.config`` (the GPT) is imported only with a config, and
``oomguide.memory`` only for a prediction.
"""

from ..i18n import LANGS
from .command import add_arguments, read_input, run
from .diagnosis import Explanation, choose_sections, diagnose, explain, model_states
from .formats import FORMATS, ExplainError, NoRequest, OOMFigures, format_size, parse_message
from .links import (
    GUIDE_SECTIONS,
    SITE_URL_ENV,
    file_link,
    guide_url,
    page_path,
    published_url,
    section_link,
    section_title,
    site_url,
)
from .render import render
from .tensors import SIXTEEN_BIT, TENSOR_NAMES, config_tensors, search_logits
from .words import TEXT

__all__ = [
    "FORMATS",
    "GUIDE_SECTIONS",
    "LANGS",
    "SITE_URL_ENV",
    "SIXTEEN_BIT",
    "TENSOR_NAMES",
    "TEXT",
    "ExplainError",
    "Explanation",
    "NoRequest",
    "OOMFigures",
    "add_arguments",
    "choose_sections",
    "config_tensors",
    "diagnose",
    "explain",
    "file_link",
    "format_size",
    "guide_url",
    "model_states",
    "page_path",
    "parse_message",
    "published_url",
    "read_input",
    "render",
    "run",
    "search_logits",
    "section_link",
    "section_title",
    "site_url",
]
