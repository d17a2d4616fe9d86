"""MkDocs hooks of the site (``hooks:`` in mkdocs.yml).

Two jobs:

* **Figures.** Every page's Markdown goes through :func:`oomguide.figures.render`, so a
  ``{{ key }}`` placeholder becomes the figure the examples computed, formatted for the
  page's language. A missing figure fails the build with the file and the key.
* **Notebooks as pages.** mkdocs-static-i18n rebuilds every File of the docs folder as a
  plain ``File`` (priority -100), which turns mkdocs-jupyter's notebook pages back into
  static downloads (mkdocs-static-i18n issue #198). After it (priority -150), the notebook
  files, and their alternates for the language switcher, become documentation pages again
  at ``/<lang>/<stem>/`` (``/<stem>/`` for English).

The language and stem of a page come from its source path: with ``docs_structure:
folder`` every page's ``file.src_uri`` is ``<lang>/<stem>.md`` (``en/index.md``,
``ja/verify.md``); a page that falls back to English keeps ``en/...``, so its figures are
formatted the English way, like its text.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from pathlib import PurePosixPath

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

from oomguide import figures

DEFAULT_LANG = "en"


def page_lang_and_stem(src_uri: str) -> tuple[str, str]:
    """(language, stem) of a page from its source path relative to docs/."""
    path = PurePosixPath(src_uri)
    lang = path.parts[0] if len(path.parts) > 1 and path.parts[0] in figures.LANGS else DEFAULT_LANG
    return lang, path.stem


def on_page_markdown(markdown: str, page, config, files) -> str:
    lang, stem = page_lang_and_stem(page.file.src_uri)
    try:
        return figures.render(markdown, stem, lang)
    except figures.FigureError as err:
        raise PluginError(f"docs/{page.file.src_uri}: {err}") from err


# --- notebooks -------------------------------------------------------------------------


class NotebookPage(File):
    """A notebook under docs/<lang>/ that is rendered as a page, not copied as a file."""

    def is_documentation_page(self) -> bool:
        return True

    def is_static_page(self) -> bool:
        return False

    def is_media_file(self) -> bool:
        return False


def _notebook_patterns(config) -> list[str]:
    plugin = config.plugins.get("mkdocs-jupyter")
    return list(plugin.config["include"]) if plugin else []


def _is_notebook(file: File, patterns: list[str]) -> bool:
    if isinstance(file, NotebookPage):
        return True
    name = posixpath.basename(file.src_uri)
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns) and name.endswith(".ipynb")


def _page_dest(lang_dir: str, stem: str, use_directory_urls: bool) -> str:
    if use_directory_urls:
        return posixpath.join(lang_dir, stem, "index.html")
    return posixpath.join(lang_dir, stem + ".html")


def _as_page(file: File, config, dest: str) -> NotebookPage:
    """The same source file, rendered as a page at `dest`; keeps what i18n recorded on it."""
    page = NotebookPage(
        file.src_uri,
        file.src_dir,
        config.site_dir,
        config.use_directory_urls,
        dest_uri=dest,
        inclusion=file.inclusion,
    )
    for key, value in vars(file).items():  # locale, localization, norm_src_uri, ...
        if key not in ("dest_uri", "url", "abs_dest_path", "src_uri", "src_dir", "dest_dir", "name"):
            page.__dict__.setdefault(key, value)
    return page


@event_priority(-150)  # after mkdocs-static-i18n (-100), which made the notebooks plain files
def on_files(files: Files, config) -> Files:
    patterns = _notebook_patterns(config)
    i18n = config.plugins.get("i18n")
    notebooks = [f for f in files if _is_notebook(f, patterns)] if patterns else []
    if not notebooks:
        return files
    current = getattr(i18n, "current_language", None) or DEFAULT_LANG
    default = getattr(i18n, "default_language", None) or DEFAULT_LANG
    languages = list(getattr(i18n, "build_languages", None) or [current])

    def lang_dir(lang: str) -> str:
        return "" if lang == default else lang

    for file in notebooks:
        norm = getattr(file, "norm_src_uri", file.src_uri)  # "where-the-memory-goes.ipynb"
        stem = posixpath.splitext(posixpath.basename(norm))[0]
        sub = posixpath.dirname(norm)
        page = _as_page(
            file, config, _page_dest(posixpath.join(lang_dir(current), sub), stem, config.use_directory_urls)
        )
        # the language switcher links to page.file.alternates[lang].url: one page per language,
        # the language's own notebook where it exists, else the default language's one
        alternates = {}
        for lang in languages:
            if lang == current:
                alternates[lang] = page
                continue
            src = posixpath.join(lang, norm)
            if not os.path.exists(os.path.join(config.docs_dir, src)):
                src = posixpath.join(default, norm)
            alt = File(src, config.docs_dir, config.site_dir, config.use_directory_urls)
            alternates[lang] = _as_page(
                alt, config, _page_dest(posixpath.join(lang_dir(lang), sub), stem, config.use_directory_urls)
            )
        page.alternates = alternates
        files.remove(file)
        files.append(page)

    # the sitemap's per-language list of pages was taken before the notebooks were pages
    if i18n is not None and hasattr(i18n, "i18n_files_per_language"):
        i18n.i18n_files_per_language[current] = files.documentation_pages()
    return files
