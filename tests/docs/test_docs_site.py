"""The documentation site builds strictly (`make docs`), its generated reference pages hold what
the code says, and a template parameter without a description fails the build, naming it.

The builds run `mkdocs build --strict` as `make docs` does, in a process of its own, into a
temporary folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

from decision_router.config import Settings as FunctionSettings
from decision_server.settings import Settings as ContainerSettings
from local.cloudformation import Stack

REPO = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")


def build(site: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true", **environment}
    return subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(site)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def text_of(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html))


def table_rows(html: str) -> dict[str, list[str]]:
    """Every table row of a page: its first cell's text -> the texts of its cells."""
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", html, flags=re.S):
        cells = [" ".join(text_of(c).split()) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        if cells:
            rows[cells[0]] = cells
    return rows


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = build(out)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


@pytest.mark.server  # mkdocs in a process of its own
def test_the_site_builds_strictly_with_every_page_of_the_nav(site):
    for page in ("index.html", "quickstart/index.html", "concepts/index.html", "sources/cloudwatch-alarms/index.html",
                 "destinations/team-queues/index.html", "noise/index.html", "review-console/index.html",
                 "learning/relearning/index.html", "security/index.html", "operations/failure-modes/index.html",
                 "container/index.html", "benchmarks/index.html", "architecture/index.html"):
        assert (site / page).is_file(), page
    assert (site / "review-console.png").is_file() and (site / "learning-curve.png").is_file()
    assert not list(site.rglob("*.py")), "the generator script is not a page"


@pytest.mark.server
def test_the_site_loads_nothing_from_the_network(site):
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        remote = re.findall(r"<(?:script|link|img)[^>]+(?:src|href)=\"(https?://[^\"]+)\"", html)
        assert not remote, (page.relative_to(site), remote)


@pytest.mark.server
def test_the_configuration_reference_lists_every_parameter_and_variable_with_its_default(site):
    rows = table_rows((site / "reference/configuration/index.html").read_text(encoding="utf-8"))
    template = Stack.load(parameters={"ExistingEndpointName": "e"}).template
    for name, parameter in template["Parameters"].items():
        kind, default, description = rows[name][1:]
        description = description.split(" Allowed: ")[0]
        assert kind == parameter["Type"], name
        assert default == (str(parameter["Default"]) or '""') if "Default" in parameter else default == "required", name
        assert description == " ".join(str(parameter["Description"]).split()), name
    for field in FunctionSettings.model_fields.values():
        assert rows[str(field.validation_alias)][3].split(" Allowed: ")[0] == field.description
    for variable, default, description in ContainerSettings.from_env({}).env_documentation():
        documented = rows[variable][2]
        if variable == "SM_LLAMA_CPP_THREADS":  # the machine's CPUs
            assert documented == "The CPUs available to the process"
        else:
            assert documented == ("unset" if default == "None" else default), (variable, default)
        assert rows[variable][3].startswith(description.removeprefix(f"{variable}: ")), variable
    assert rows["SM_LLAMA_CPP_THREADS"][3].endswith("Also read as SEMIF_THREADS (ours wins where both are set). Allowed: ≥ 1")


@pytest.mark.server
def test_the_container_api_page_renders_the_servers_own_openapi_document(site):
    text = " ".join(text_of((site / "reference/container-api/index.html").read_text(encoding="utf-8")).split())
    for path in ("/ping", "/invocations", "/endpoints/{endpoint_name}/invocations", "/v1/chat/completions",
                 "/v1/models", "/v1/systemone"):
        assert path in text, path
    assert "ErrorResponse" in text
    assert (site / "reference/openapi.json").is_file()


@pytest.mark.server
def test_a_parameter_without_a_description_fails_the_build_naming_it(tmp_path):
    template = (REPO / "template.yaml").read_text(encoding="utf-8")
    assert "\nParameters:\n" in template
    copied = tmp_path / "template.yaml"
    copied.write_text(template.replace("\nParameters:\n", "\nParameters:\n  UndescribedKnob:\n    Type: String\n"
                                       "    Default: \"off\"\n", 1), encoding="utf-8")
    run = build(tmp_path / "site", DOCS_TEMPLATE=str(copied))
    assert run.returncode != 0
    assert "no description for template.yaml parameter 'UndescribedKnob'" in run.stdout + run.stderr
    # the same template with the description added builds
    copied.write_text(template.replace("\nParameters:\n", "\nParameters:\n  UndescribedKnob:\n    Type: String\n"
                                       "    Default: \"off\"\n    Description: A knob.\n", 1), encoding="utf-8")
    run = build(tmp_path / "site", DOCS_TEMPLATE=str(copied))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "UndescribedKnob" in (tmp_path / "site/reference/configuration/index.html").read_text(encoding="utf-8")


@pytest.mark.server
def test_the_drawings_are_mermaid_diagrams_drawn_by_the_sites_own_copy_of_mermaid(site):
    """No ASCII drawing cut off at the column's width: Mermaid fences, which the theme draws with the
    copy of Mermaid the site carries (with it on the page, the theme fetches none from a CDN)."""
    for page in ("index.html", "architecture/index.html", "learning/index.html", "learning/relearning/index.html"):
        html = (site / page).read_text(encoding="utf-8")
        assert '<pre class="mermaid"><code>' in html, page
        assert re.search(r'<script src="(\.\./)*javascripts/mermaid\.min\.js"></script>', html), page
        assert "──▶" not in html and "─▶" not in html, page
    assert (site / "javascripts/mermaid.min.js").stat().st_size > 1_000_000


@pytest.mark.server
def test_the_item_shapes_page_lists_each_fields_allowed_values(site):
    rows = table_rows((site / "reference/items/index.html").read_text(encoding="utf-8"))
    assert rows["tier"][1:4] == ["string", "required", "one of free, pro, enterprise"]
    assert rows["channel"][3] == "one of email, chat, web, billing-portal, phone"
    assert rows["severity"][3] == "one of sev1, sev2, sev3, sev4"
    assert rows["ticket_id"][3].startswith("length ≥ 1; length ≤ 128")
    tickets = (site / "sources/sqs-tickets/index.html").read_text(encoding="utf-8")
    assert 'href="../../reference/items/#ticket"' in tickets
