"""Test modules share helpers through the utility modules of ``tests/``
(``tests/utils.py``, ``tests/import_fixtures.py``, ``tests/golden_outputs.py``,
``tests/sparse_fixtures.py``, ...) or ``conftest.py``, never by importing
another ``test_*`` module: such an import runs that module's collection-time
code again under a second name and ties one test file to the insides of
another (issue 46)."""

import ast
import os
from typing import Iterable, List, Set, Tuple

from tests.utils import REPO_ROOT

TESTS_DIR = os.path.join(REPO_ROOT, "tests")


def imports_of_test_modules(files: Iterable[Tuple[str, str]], test_modules: Set[str]) -> List[str]:
    """``path:line: imports NAME`` for every import of a module of
    ``test_modules`` (``import tests.test_x``, ``from tests.test_x import y``,
    ``from tests import test_x``, ``from .test_x import y``), at the top of a
    file or inside a function. ``from tests.utils import test_device`` (a
    function of a utility module) is no such import."""
    found = []
    for path, source in files:
        package = os.path.dirname(path).replace(os.sep, ".").replace("/", ".")
        for node in ast.walk(ast.parse(source, path)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                names = [module] if module in test_modules else [f"{module}.{alias.name}" for alias in node.names]
            else:
                continue
            found.extend((path, node.lineno, name) for name in names if name in test_modules)
    return [f"{path}:{line}: imports {name}" for path, line, name in sorted(found)]


def files_of_tests() -> Iterable[Tuple[str, str]]:
    """``(path relative to the repository, source)`` of every Python file of ``tests/``."""
    for directory, subdirectories, names in os.walk(TESTS_DIR):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__" and not d.startswith("."))
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as handle:
                    yield os.path.relpath(path, REPO_ROOT), handle.read()


def test_no_test_module_imports_another():
    files = list(files_of_tests())
    assert len(files) > 50 and any(path == os.path.join("tests", "utils.py") for path, _ in files)
    test_modules = {path[:-3].replace(os.sep, ".") for path, _ in files if os.path.basename(path).startswith("test_")}
    assert imports_of_test_modules(files, test_modules) == []


def test_the_check_finds_every_form_of_import():
    bad = [
        ("tests/test_a.py", "from tests.test_b import helper\nimport tests.test_c\n"),
        ("tests/test_d.py", "def f():\n    from tests import test_e, utils\n    from .test_f import g\n"),
        ("tests/test_ok.py", "from tests.utils import REPO_ROOT, test_device\nfrom tests import golden_outputs\n"),
    ]
    test_modules = {"tests.test_a", "tests.test_b", "tests.test_c", "tests.test_d", "tests.test_e", "tests.test_f"}
    assert imports_of_test_modules(bad, test_modules) == [
        "tests/test_a.py:1: imports tests.test_b",
        "tests/test_a.py:2: imports tests.test_c",
        "tests/test_d.py:2: imports tests.test_e",
        "tests/test_d.py:3: imports tests.test_f",
    ]
