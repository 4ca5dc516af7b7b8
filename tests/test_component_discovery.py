"""Component modules register themselves: ``mdsfair/modules/__init__.py``
imports every module of the package, so each ``*_components.py`` file's
``@register_component`` classes are choices of their role's flag as soon as
any module of :mod:`mdsfair.modules` is imported, with no import of the file
kept by hand elsewhere (issue 43).

The expected registrations are read from the files themselves (``ast``), and
each check runs in a fresh interpreter, so the import order is the real one
(this test process has long imported every model)."""

import ast
import glob
import os
import shutil
import subprocess
import sys
from typing import Dict, Set, Tuple

from tests.utils import REPO_ROOT

#: A component module that no other file imports, written into a copy of the
#: package: it must register as the shipped ones do.
NEW_COMPONENT_MODULE = '''"""A component module that nothing imports by name."""
from mdsfair.modules.components import Component, register_component


@register_component("encoder_self_attention", "discovered-attention")
class DiscoveredSelfAttention(Component):
    """Registered only through the package's discovery of its modules."""
'''

#: Run in a fresh interpreter with the package to check first on the path:
#: import the component registry alone (no model module), then register
#: everything; print what was registered at each point and the choices of
#: the role flags of every component-built model (``add_component_args``).
REGISTRY_PROBE = """
import json, sys
from mdsfair.modules.components import ROLES, component_names
alone = {role: sorted(component_names(role)) for role in ROLES}
models_imported = "mdsfair.models" in sys.modules
import mdsfair
mdsfair.register()
registered = {role: sorted(component_names(role)) for role in ROLES}
import argparse
from mdsfair.models.component_flags import add_component_args
parser = argparse.ArgumentParser()
add_component_args(parser)
choices = {action.dest: sorted(action.choices) for action in parser._actions if action.dest in ROLES}
print(json.dumps({"alone": alone, "models_imported": models_imported, "registered": registered,
                  "choices": choices}))
"""


def declared_registrations(package_dir: str) -> Dict[str, Set[str]]:
    """``{role: {name}}`` of every ``@register_component(role, name)`` in the
    ``*_components.py`` files of ``package_dir/modules``."""
    declared: Dict[str, Set[str]] = {}
    for path in sorted(glob.glob(os.path.join(package_dir, "modules", "*_components.py"))):
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and isinstance(decorator.func, ast.Name)
                    and decorator.func.id == "register_component"
                ):
                    role, name = (ast.literal_eval(argument) for argument in decorator.args)
                    declared.setdefault(role, set()).add(name)
    return declared


def probe_registry(root: str) -> dict:
    """:data:`REGISTRY_PROBE` in a fresh interpreter with ``root`` first on the path."""
    import json

    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-c", REGISTRY_PROBE], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def missing(declared: Dict[str, Set[str]], registered: Dict[str, list]) -> Set[Tuple[str, str]]:
    return {(role, name) for role, names in declared.items() for name in names if name not in registered.get(role, [])}


def test_every_component_module_registers_before_any_model_is_imported():
    declared = declared_registrations(os.path.join(REPO_ROOT, "mdsfair"))
    assert set(declared) == {"encoder_self_attention", "encoder_positions", "cross_attention"}
    probe = probe_registry(REPO_ROOT)
    assert probe["models_imported"] is False  # the registry alone: no model module did the importing
    assert missing(declared, probe["alone"]) == set()
    assert missing(declared, probe["registered"]) == set()
    assert missing(declared, probe["choices"]) == set()


def test_a_new_component_module_registers_with_no_other_change(tmp_path):
    """A copy of the package plus one new ``*_components.py`` file that no
    other file names: the registry lists its component, with or without
    ``mdsfair.register()``, and ``--encoder-self-attention`` offers it."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(os.path.join(REPO_ROOT, "mdsfair"), tmp_path / "mdsfair", symlinks=True, ignore=ignore)
    shutil.copytree(os.path.join(REPO_ROOT, "preprocess"), tmp_path / "preprocess", symlinks=True, ignore=ignore)
    (tmp_path / "mdsfair" / "modules" / "discovered_components.py").write_text(NEW_COMPONENT_MODULE, encoding="utf-8")
    declared = declared_registrations(str(tmp_path / "mdsfair"))
    assert "discovered-attention" in declared["encoder_self_attention"]
    probe = probe_registry(str(tmp_path))
    assert probe["models_imported"] is False
    assert missing(declared, probe["alone"]) == set()
    assert missing(declared, probe["registered"]) == set()
    assert missing(declared, probe["choices"]) == set()
