"""Import every module of a sub-package so that its registrations run."""

import importlib
import os


def import_all_submodules(package_name, package_file):
    """Import each ``*.py`` file and sub-package beside ``package_file``."""
    directory = os.path.dirname(package_file)
    for entry in sorted(os.listdir(directory)):
        path = os.path.join(directory, entry)
        if entry.startswith(("_", ".")):
            continue
        if entry.endswith(".py"):
            importlib.import_module(f"{package_name}.{entry[:-3]}")
        elif os.path.isdir(path) and os.path.exists(os.path.join(path, "__init__.py")):
            importlib.import_module(f"{package_name}.{entry}")
