"""README.md read on GitHub: its links lead to files of the repository, it names every page the
site generates (which exist in the built site only) and what to read for each on GitHub, and the
commands it gives run as written."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_every_relative_link_of_the_readme_is_a_file_of_the_repository():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    assert links
    dead = [link for link in links if not link.startswith(("http://", "https://")) and not (REPO / link).exists()]
    assert not dead, f"links to files GitHub does not have (a generated page?): {dead}"


def test_the_readme_names_every_generated_page_and_its_source_on_github():
    generator = (REPO / "docs/gen_reference.py").read_text(encoding="utf-8")
    pages = re.findall(r'mkdocs_gen_files\.open\("([^"]+\.md)"', generator)
    assert len(pages) == 4, pages
    for page in pages:
        row = next((line for line in README.splitlines() if f"(`{page}`)" in line), None)
        assert row is not None and row.count("|") == 3, f"README: no row for the generated page {page}"
        assert row.split("|")[2].strip(), page  # what to read on GitHub instead
    assert "Four pages are generated" in README


def test_the_redrive_command_runs_as_written():
    """`python -m ops.redrive` alone fails (`No module named 'decision_router'`): the Makefile sets
    the PYTHONPATH it needs, so the README gives make's target."""
    assert "python -m ops.redrive" not in README
    assert "make redrive DLQ=workflow|tickets|incidents" in README
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "redrive: $(STAMP)" in makefile and "$(PY) -m ops.redrive $(DLQ)" in makefile
    assert "export PYTHONPATH := $(CURDIR)/contract:$(CURDIR)/container:$(CURDIR)/functions:$(CURDIR)" in makefile


def test_the_readme_lists_what_the_first_make_needs():
    for needed in ("Python 3.11", "C++ compiler and CMake", "make venv", "chromium"):
        assert needed in README, needed
