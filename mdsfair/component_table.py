"""The tables of components in the documentation, generated from the registry.

``docs/components.md`` and ARCHITECTURE.md each hold a table of every
registered component of mdsfair (:mod:`mdsfair.modules.components`): its role
(the flag that chooses it), name, where it comes from (the class's ``paper``
and ``summary``), its flags (the fields of its configuration), the side inputs
it may read (``side_input_notes``) and, in ARCHITECTURE.md, the modules that
hold it. Each table stands between the lines ``<!-- components:table -->`` and
``<!-- /components:table -->``; ``python -m mdsfair.component_table --write``
rewrites them from the registry, ``--check`` exits with status 1 when one
differs (``tests/test_component_table.py`` keeps them equal).
"""

import argparse
import dataclasses
import os
import sys
from typing import Dict, List, Optional, Sequence

# importing it imports the package mdsfair.modules, which imports every module: every component registers
from mdsfair.modules.components import ROLES, component_classes, flag_of

#: The repository's documents that hold a table, and whether it lists the modules.
DOCUMENTS: Dict[str, bool] = {"docs/components.md": False, "ARCHITECTURE.md": True}
START, END = "<!-- components:table -->", "<!-- /components:table -->"


def mdsfair_components() -> List[type]:
    """mdsfair's own registered components, role by role, in registration order
    (a component a test or a user's package registered is not mdsfair's)."""
    return [cls for cls in component_classes() if cls.__module__.startswith("mdsfair.")]


def module_file(module: str) -> str:
    """``mdsfair.modules.x`` as ``x.py`` (the folder every component lives in), else dotted."""
    prefix = "mdsfair.modules."
    return f"`{module[len(prefix) :]}.py`" if module.startswith(prefix) else f"`{module}`"


def side_inputs_cell(notes: Dict[str, str]) -> str:
    """The side inputs, those with the same note together: ``a``, ``b`` (note)."""
    if not notes:
        return "none"
    by_note: Dict[str, List[str]] = {}
    for name, note in notes.items():
        by_note.setdefault(note, []).append(f"`{name}`")
    return "; ".join(", ".join(names) + (f" ({note})" if note else "") for note, names in by_note.items())


def component_table(with_modules: bool, classes: Optional[Sequence[type]] = None) -> str:
    """The Markdown table of ``classes`` (default: mdsfair's components)."""
    classes = mdsfair_components() if classes is None else classes
    header = ["role (flag)", "component", "from", "flags", "side inputs"] + (["modules"] if with_modules else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for role in ROLES:
        for index, cls in enumerate(c for c in classes if c.role == role):
            origin = cls.paper + (f": {cls.summary}" if cls.summary else "")
            flags = ", ".join(f"`{flag_of(f.name)}`" for f in dataclasses.fields(cls.config_class)) or "none"
            cells = [f"`{flag_of(role)}`" if index == 0 else "", f"`{cls.name}`", origin, flags]
            cells.append(side_inputs_cell(cls.side_input_notes))
            if with_modules:
                cells.append(", ".join(module_file(m) for m in (cls.__module__, *cls.implemented_in)))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def with_table(text: str, table: str, path: str) -> str:
    """``text`` with the lines between its markers replaced by ``table``."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise ValueError(f"{path}: needs one {START} line and one {END} line after it")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    return f"{before}{START}\n\n{table}\n{END}{after}"


def repository_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def differing_documents(root: str, write: bool) -> List[str]:
    """The documents whose table is not the registry's (rewritten when ``write``)."""
    differing = []
    for relative, with_modules in DOCUMENTS.items():
        path = os.path.join(root, relative)
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        updated = with_table(text, component_table(with_modules), relative)
        if updated != text:
            differing.append(relative)
            if write:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(updated)
    return differing


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mdsfair.component_table",
        description="The tables of components in docs/components.md and ARCHITECTURE.md, from the registry.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite the tables that differ from the registry")
    action.add_argument("--check", action="store_true", help="exit with status 1 when a table differs")
    args = parser.parse_args(argv)
    differing = differing_documents(repository_root(), write=args.write)
    for relative in differing:
        print(f"{'rewrote' if args.write else 'differs from the registry:'} {relative}")
    return 1 if differing and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
