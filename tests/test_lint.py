"""The repository is formatted and linted as ``ruff.toml`` says (``ruff
format --check`` and ``ruff check``), so formatting never mixes with a
change under review. Run ``ruff format . && ruff check --fix .`` before
committing (docs/contributing.md)."""

import shutil
import subprocess
import sys

import pytest

from tests.utils import REPO_ROOT


def ruff(*arguments):
    executable = shutil.which("ruff")
    command = [executable] if executable else [sys.executable, "-m", "ruff"]
    return subprocess.run(command + list(arguments), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module", autouse=True)
def ruff_installed():
    version = ruff("--version")
    assert version.returncode == 0, f"ruff is not installed (pip install -e '.[test]'): {version.stderr}"


def test_the_repository_is_formatted():
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, "run `ruff format .`:\n" + result.stdout + result.stderr


def test_the_repository_passes_the_linter():
    result = ruff("check", ".")
    assert result.returncode == 0, "run `ruff check --fix .`:\n" + result.stdout + result.stderr


def test_the_linter_reports_a_problem(tmp_path):
    """The check can fail: an unused import and an unformatted line are found."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx=1\n", encoding="utf-8")
    config = str(REPO_ROOT) + "/ruff.toml"
    assert ruff("check", "--config", config, str(bad)).returncode != 0
    assert ruff("format", "--check", "--config", config, str(bad)).returncode != 0
