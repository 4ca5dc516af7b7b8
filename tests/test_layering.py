"""The layering of ARCHITECTURE.md, checked on every module's imports.

Each module of ``mdsfair/`` and ``preprocess/`` (``mdsfair.preprocess``) is
parsed with :mod:`ast`; every ``import`` of an mdsfair module, at the top of
the file or inside a function, must point to the same layer or a lower one
(:data:`LAYERS`), imports must form no cycle (module-level ones none at all, lazy ones only
those of :data:`KNOWN_LAZY_CYCLES`), and only
``mdsfair/fairseq_patches.py`` may assign to an attribute of fairseq. The
checks run on the repository and on synthetic bad modules (they can fail).
"""
import ast
import os
from typing import Dict, Iterator, List, Optional, Set, Tuple

from tests.utils import REPO_ROOT

#: Layers from the bottom up; a module belongs to the layer of its longest
#: listed prefix and may import modules of its own layer or of lower ones.
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    ("foundation", ("mdsfair", "mdsfair._autoimport", "mdsfair.text", "mdsfair.raw_contract", "mdsfair.lexrank",
                    "mdsfair.data", "mdsfair.checkpoint_loading", "mdsfair.checkpoints", "mdsfair.fairseq_patches")),
    ("modules", ("mdsfair.modules",)),
    ("generation", ("mdsfair.generation",)),
    ("models", ("mdsfair.models", "mdsfair.criterions")),
    ("preprocess", ("mdsfair.preprocess",)),
    ("tasks", ("mdsfair.tasks",)),
    ("applications", ("mdsfair.hub_interface", "mdsfair.importers", "mdsfair.cli")),
    ("evaluation", ("mdsfair.evaluation",)),
]

#: Upward imports allowed by name, each inside a function, with the reason.
ALLOWED_UPWARD = {
    # A model class's from_pretrained returns the hub interface (which needs
    # tasks and preprocessing), as fairseq's BARTModel.from_pretrained imports
    # its BARTHubInterface: imported when a model is loaded, never at import.
    ("mdsfair.models.hub", "mdsfair.hub_interface"),
}

#: Import cycles through function-level (lazy) imports that remain, each with
#: the reason; module-level cycles are never allowed.
KNOWN_LAZY_CYCLES = {
    # pipeline.preprocessing_args rebuilds the arguments mdsfair-preprocess ran
    # with from the command's own parser (binarize.get_parser), the one place
    # its defaults are written; binarize encodes with pipeline.ClusterEncoder.
    ("mdsfair.preprocess.binarize", "mdsfair.preprocess.pipeline"),
}

#: The only module that may assign to an attribute of fairseq.
PATCH_MODULE = "mdsfair.fairseq_patches"


def layer_of(module: str) -> Optional[int]:
    """Index in :data:`LAYERS` of ``module`` (its longest listed prefix)."""
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


def repository_sources() -> Dict[str, Tuple[str, str]]:
    """``{module name: (path, source)}`` of every module of mdsfair and preprocess."""
    sources = {}
    for top, package in (("mdsfair", "mdsfair"), ("preprocess", "mdsfair.preprocess")):
        for directory, subdirectories, files in os.walk(os.path.join(REPO_ROOT, top)):
            subdirectories[:] = sorted(d for d in subdirectories if not d.startswith((".", "__pycache__")))
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                path = os.path.join(directory, name)
                parts = os.path.relpath(path, os.path.join(REPO_ROOT, top))[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                module = ".".join([package] + parts)
                with open(path, encoding="utf-8") as handle:
                    sources[module] = (os.path.relpath(path, REPO_ROOT), handle.read())
    return sources


def is_package(module: str, sources: Dict[str, Tuple[str, str]]) -> bool:
    return sources[module][0].endswith("__init__.py")


def imported_modules(module: str, sources) -> Iterator[Tuple[str, int, bool]]:
    """``(imported mdsfair module, line, at module level)`` of every import in
    ``module``; ``from package import name`` counts as ``package.name`` when
    that is a module."""
    path, source = sources[module]
    tree = ast.parse(source, path)
    top_level = {id(node) for node in tree.body}
    for node in tree.body:  # imports guarded by if/try at module level are module level too
        if isinstance(node, (ast.If, ast.Try)):
            top_level.update(id(child) for child in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package(module, sources) else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{alias.name}" if f"{target}.{alias.name}" in sources else target
                     for alias in node.names]
        else:
            continue
        for name in names:
            if name == "mdsfair" or name.startswith("mdsfair."):
                while name not in sources and "." in name:  # an attribute of a module: the module
                    name = name.rsplit(".", 1)[0]
                yield name, node.lineno, id(node) in top_level


def layering_violations(sources) -> List[str]:
    """Every import that points to a higher layer (and is not allowed by name)."""
    problems = []
    for module in sorted(sources):
        own = layer_of(module)
        if own is None:
            problems.append(f"{sources[module][0]}: module {module} belongs to no layer of ARCHITECTURE.md")
            continue
        for imported, line, _ in imported_modules(module, sources):
            target = layer_of(imported)
            if target is not None and target > own and (module, imported) not in ALLOWED_UPWARD:
                problems.append(
                    f"{sources[module][0]}:{line}: {module} (layer {LAYERS[own][0]}) imports {imported} "
                    f"(layer {LAYERS[target][0]}, above it)"
                )
    return problems


def import_cycles(sources, module_level_only: bool = True) -> List[List[str]]:
    """Cycles of imports (strongly connected components of more than one
    module, or a module importing itself), each sorted; of module-level
    imports only, or of every import (lazy ones too)."""
    graph: Dict[str, Set[str]] = {module: set() for module in sources}
    for module in sources:
        for imported, _, module_level in imported_modules(module, sources):
            if (module_level or not module_level_only) and imported in sources:
                # importing a.b.c runs the __init__ of a and a.b first: those are
                # not edges of the cycle check (packages import their children)
                graph[module].add(imported)
    index_of, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan
        index_of[node] = low[node] = len(index_of)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index_of:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index_of[successor])
        if low[node] == index_of[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index_of:
            visit(node)
    # a package and the modules it imports for registration are not a cycle of its own making
    return [c for c in components if not all(m == c[0] or m.startswith(c[0] + ".") for m in c)]


def fairseq_patches_outside_their_file(sources) -> List[str]:
    """Assignments to an attribute of a fairseq module or object outside
    :data:`PATCH_MODULE` (``fairseq.x.y = ...``, ``setattr(x, ...)`` where
    ``x`` was imported from fairseq)."""
    problems = []
    for module in sorted(sources):
        if module == PATCH_MODULE:
            continue
        path, source = sources[module]
        tree = ast.parse(source, path)
        fairseq_names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                fairseq_names.update((a.asname or a.name).split(".")[0] for a in node.names
                                     if a.name.split(".")[0] == "fairseq")
            elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "fairseq":
                fairseq_names.update(a.asname or a.name for a in node.names)

        def root(expression) -> Optional[str]:
            while isinstance(expression, ast.Attribute):
                expression = expression.value
            return expression.id if isinstance(expression, ast.Name) else None

        for node in ast.walk(tree):
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                targets = [t for t in targets if isinstance(t, ast.Attribute)]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                targets = node.args[:1]
            for target in targets:
                if root(target) in fairseq_names:
                    problems.append(f"{path}:{node.lineno}: assigns to fairseq's {ast.unparse(target)} "
                                    f"(patches of fairseq belong in {PATCH_MODULE})")
    return problems


# ------------------------------------------------------------------ tests


def test_every_import_points_down_the_layers():
    assert layering_violations(repository_sources()) == []


def test_imports_form_no_cycle():
    sources = repository_sources()
    assert import_cycles(sources) == []
    assert [tuple(c) for c in import_cycles(sources, module_level_only=False)] == sorted(KNOWN_LAZY_CYCLES)


def test_only_fairseq_patches_assigns_to_fairseq():
    sources = repository_sources()
    assert fairseq_patches_outside_their_file(sources) == []
    # the checker sees the one patch that exists, where it belongs
    assert fairseq_patches_outside_their_file({"mdsfair.x": sources[PATCH_MODULE]}) != []


def synthetic(extra: Dict[str, str]) -> Dict[str, Tuple[str, str]]:
    """The repository's modules plus synthetic ones (``{module: source}``)."""
    sources = repository_sources()
    for module, source in extra.items():
        sources[module] = (module.replace(".", "/") + ".py", source)
    return sources


def test_checks_fail_on_synthetic_bad_modules():
    bad = synthetic({
        # a module that imports a task (two layers up), lazily
        "mdsfair.modules.bad_attention": "def f():\n    from mdsfair.tasks.multidoc_summarization import unwrap_model\n",
        # the text layer importing evaluation, at module level
        "mdsfair.text_bad": "from mdsfair.evaluation import rouge\n",
        # a relative import from models up to the hub
        "mdsfair.models.bad_model": "from ..hub_interface import HUB_ENTRIES\n",
    })
    problems = layering_violations(bad)
    assert problems == [
        "mdsfair/models/bad_model.py:1: mdsfair.models.bad_model (layer models) imports mdsfair.hub_interface "
        "(layer applications, above it)",
        "mdsfair/modules/bad_attention.py:2: mdsfair.modules.bad_attention (layer modules) imports "
        "mdsfair.tasks.multidoc_summarization (layer tasks, above it)",
        "mdsfair/text_bad.py:1: mdsfair.text_bad (layer foundation) imports mdsfair.evaluation.rouge "
        "(layer evaluation, above it)",
    ]
    cyclic = synthetic({
        "mdsfair.evaluation.cycle_a": "from mdsfair.evaluation import cycle_b\n",
        "mdsfair.evaluation.cycle_b": "import mdsfair.evaluation.cycle_a\n",
        "mdsfair.evaluation.lazy_a": "def f():\n    from mdsfair.evaluation import lazy_b\n",
        "mdsfair.evaluation.lazy_b": "import mdsfair.evaluation.lazy_a\n",
    })
    assert import_cycles(cyclic) == [["mdsfair.evaluation.cycle_a", "mdsfair.evaluation.cycle_b"]]
    assert [c for c in import_cycles(cyclic, module_level_only=False) if "evaluation" in c[0]] == [
        ["mdsfair.evaluation.cycle_a", "mdsfair.evaluation.cycle_b"],
        ["mdsfair.evaluation.lazy_a", "mdsfair.evaluation.lazy_b"],
    ]
    patched = synthetic({
        "mdsfair.models.sneaky": (
            "from fairseq import checkpoint_utils\nimport fairseq.utils as fu\n"
            "checkpoint_utils.load_checkpoint_to_cpu = print\n"
            "def f():\n    setattr(fu, 'x', 1)\n"
        ),
    })
    assert fairseq_patches_outside_their_file(patched) == [
        "mdsfair/models/sneaky.py:3: assigns to fairseq's checkpoint_utils.load_checkpoint_to_cpu "
        "(patches of fairseq belong in mdsfair.fairseq_patches)",
        "mdsfair/models/sneaky.py:5: assigns to fairseq's fu (patches of fairseq belong in mdsfair.fairseq_patches)",
    ]


def test_every_module_has_a_layer_and_architecture_md_lists_every_layer():
    assert all(layer_of(module) is not None for module in repository_sources())
    with open(os.path.join(REPO_ROOT, "ARCHITECTURE.md"), encoding="utf-8") as handle:
        architecture = handle.read()
    for name, prefixes in LAYERS:
        assert f"**{name}**" in architecture, name
        for prefix in prefixes:
            assert f"`{prefix}`" in architecture, prefix
