"""Import the modules of a package so that their registrations run."""

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


def import_submodules_ending_with(package_name, package_file, suffix):
    """Import each module whose file name ends with ``suffix`` (such as
    ``_components.py``) beside ``package_file`` and in its sub-packages (folders
    with an ``__init__.py``), folder by folder in sorted order; names starting
    with ``_`` or ``.`` are skipped. Returns the names of the modules imported."""
    directory = os.path.dirname(os.path.abspath(package_file))
    imported = []
    for root, folders, files in os.walk(directory):
        folders[:] = sorted(
            folder
            for folder in folders
            if not folder.startswith(("_", ".")) and os.path.exists(os.path.join(root, folder, "__init__.py"))
        )
        relative = os.path.relpath(root, directory)
        prefix = package_name if relative == os.curdir else ".".join([package_name, *relative.split(os.sep)])
        for entry in sorted(files):
            if entry.endswith(suffix) and not entry.startswith(("_", ".")):
                imported.append(f"{prefix}.{entry[: -len('.py')]}")
                importlib.import_module(imported[-1])
    return imported
