"""The documentation site builds with ``mkdocs build --strict`` (a broken link,
a missing anchor or a page left out of the navigation fails), the README keeps
the shape issue 32 gave it, and the lists the pages give (hub entry points,
recipe command lines) are the code's."""

import os
import re
import subprocess
import sys

import pytest

from tests.utils import REPO_ROOT

README = os.path.join(REPO_ROOT, "README.md")


def read(path):
    with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as handle:
        return handle.read()


def test_site_builds_strict(tmp_path):
    import importlib.util

    missing = [
        name
        for name in ("mkdocs", "material", "mkdocs_include_markdown_plugin")
        if importlib.util.find_spec(name) is None
    ]
    assert not missing, f"{missing} not installed: pip install -e '.[docs]' (install.sh does)"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for page in (
        "index.html",
        "getting-started/index.html",
        "data/index.html",
        "precision/index.html",
        "recipes/hierencdec/index.html",
        "performance/index.html",
        "scaling/index.html",
    ):
        assert (tmp_path / "site" / page).is_file(), page
    # the recipes are included, not linked out of the site
    recipe = (tmp_path / "site" / "recipes" / "hierencdec" / "index.html").read_text(encoding="utf-8")
    assert "Table 3 ablations" in recipe


def test_every_page_is_in_the_navigation():
    nav = read("mkdocs.yml")
    pages = []
    for folder, _, files in os.walk(os.path.join(REPO_ROOT, "docs")):
        pages += [
            os.path.relpath(os.path.join(folder, name), os.path.join(REPO_ROOT, "docs"))
            for name in files
            if name.endswith(".md")
        ]
    missing = [page for page in pages if page not in nav]
    assert not missing


def test_readme_shape():
    """At most 200 lines; what mdsfair is and the systems table, then the set-up
    (install and quickstart, each with its time, and the quickstart's table),
    the test command with its time, the documentation links; no history."""
    text = read("README.md")
    assert len(text.splitlines()) <= 200
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings == ["Set-up", "Tests", "Documentation"]
    intro = text.split("\n## Set-up")[0]
    assert "| system | paper | `--arch` | status |" in intro
    setup = text.split("## Set-up")[1].split("## Tests")[0]
    block = re.search(r"```bash\n(.*?)```", setup, flags=re.S).group(1).splitlines()
    assert block[0].startswith("bash install.sh") and "minute" in block[0]
    assert block[1].startswith("bash examples/quickstart.sh") and "minute" in block[1]
    tests = text.split("## Tests")[1].split("## Documentation")[0]
    assert "python3 -m pytest -q -n 2 tests && python3 -m pytest -q -n 2 -m slow tests" in tests and "minutes" in tests
    for stale in ("../shared", "the issue", "device call", "2026-"):
        assert stale not in text, stale


def test_ci_runs_the_readme_commands():
    """.ci/run runs the README's install command, then its test command, as written there."""
    text = read("README.md")
    ci = read(".ci/run")
    assert "bash install.sh" in ci and "bash install.sh" in text
    assert "python3 -m pytest -q -n 2 tests && python3 -m pytest -q -n 2 -m slow tests" in ci
    # the install command installs what the site build needs
    assert '".[test,docs]"' in read("install.sh")
    assert '"docs": [' in read("setup.py")


def test_hub_entry_list_is_the_hubs():
    import mdsfair
    from mdsfair.hub_interface import HUB_ENTRIES

    mdsfair.register()
    listed = re.search(
        r"<!-- hub-entries -->(.*?)<!-- /hub-entries -->", read("docs/getting-started.md"), flags=re.S
    ).group(1)
    names = re.findall(r"`([a-z0-9_]+)`", listed)
    assert sorted(names) == sorted(HUB_ENTRIES)
    assert "led" in names


@pytest.mark.slow
def test_readme_baseline_rows_are_what_the_quickstart_prints(tmp_path):
    """The Lead and LexRank rows of the README's quickstart table are what the
    quickstart's own steps print for them (same synthetic data, seed 1, same
    baseline and scoring commands; the references are the raw test summaries,
    which the quickstart reads from its data-bin). The model's row needs the
    full training run and is not rerun here."""
    block = re.search(r"```text\n(system .*?)```", read("README.md"), flags=re.S).group(1)
    expected = {line.split()[0]: line.split() for line in block.splitlines()[1:] if not line.startswith("[")}
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)

    def run(*argv):
        result = subprocess.run(
            [sys.executable, "-m", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout

    run(
        "mdsfair.preprocess.synthetic",
        "--out-dir",
        "raw",
        "--seed",
        "1",
        "--train",
        "4000",
        "--valid",
        "100",
        "--test",
        "100",
    )
    run("mdsfair.evaluation.baselines", "--method", "lead", "--lead-sentences", "3", "raw/test.jsonl", "-o", "lead.txt")
    run(
        "mdsfair.evaluation.baselines",
        "--method",
        "lexrank",
        "--num-sentences",
        "3",
        "raw/test.jsonl",
        "-o",
        "lexrank.txt",
    )
    import json

    with open(tmp_path / "raw" / "test.jsonl", encoding="utf-8") as source, open(tmp_path / "ref.txt", "w") as ref:
        for line in source:
            ref.write(" ".join(json.loads(line)["summary"].split()) + "\n")
    printed = run("mdsfair.evaluation.compare", "--ref", "ref.txt", "lead=lead.txt", "lexrank=lexrank.txt")
    rows = {
        line.split()[0]: line.split() for line in printed.splitlines() if line.split()[:1] in (["lead"], ["lexrank"])
    }
    assert rows == {name: expected[name] for name in ("lead", "lexrank")}
