"""Shared fixtures of the site tests: the site is built once per session and reused."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class SiteBuild:
    site: Path
    returncode: int
    output: str
    seconds: float


@pytest.fixture(scope="session")
def site_build(tmp_path_factory) -> SiteBuild:
    """`mkdocs build --strict` of the whole site (five languages), once, into a temp dir."""
    site = tmp_path_factory.mktemp("site")
    # OOMGUIDE_NOTEBOOK_CACHE=false: the notebooks are executed, never taken from mkdocs-jupyter's cache
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONUNBUFFERED="1", OOMGUIDE_NOTEBOOK_CACHE="false")
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return SiteBuild(site, proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - start)


@pytest.fixture(scope="session")
def site(site_build: SiteBuild) -> Path:
    """The built site; tests that need it fail (not error) with the build log when it did not build."""
    if site_build.returncode != 0:
        pytest.fail(
            f"mkdocs build --strict failed (exit {site_build.returncode}):\n{site_build.output[-4000:]}"
        )
    return site_build.site


@pytest.fixture(autouse=True)
def english_locale(monkeypatch):
    """The CLI speaks the environment's language by default (LC_ALL, LC_MESSAGES, LANG): the tests
    read its English unless they ask for another language with --lang."""
    for name in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="re-record tests/golden/ (the outputs of oomguide explain and check) instead of comparing",
    )
