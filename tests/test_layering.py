"""The layering of ARCHITECTURE.md, checked on every module's imports.

Each module of ``mdsfair/`` and ``preprocess/`` (``mdsfair.preprocess``, through
the link ``mdsfair/preprocess``) is parsed with :mod:`ast`; every ``import`` of an mdsfair module, at the top of
the file or inside a function, must point to the same layer or a lower one
(:data:`LAYERS`), imports must form no cycle (module-level or lazy), and only
``mdsfair/fairseq_patches.py`` may assign to an attribute of fairseq. The
checks run on the repository and on synthetic bad modules (they can fail).
"""

import ast
import os
import re
from typing import Dict, Iterator, List, Optional, Set, Tuple

from tests.utils import REPO_ROOT

#: Layers from the bottom up; a module belongs to the layer of its longest
#: listed prefix and may import modules of its own layer or of lower ones.
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    (
        "foundation",
        (
            "mdsfair",
            "mdsfair._autoimport",
            "mdsfair.argument_types",
            "mdsfair.text",
            "mdsfair.raw_contract",
            "mdsfair.lexrank",
            "mdsfair.data",
            "mdsfair.checkpoint_loading",
            "mdsfair.checkpoints",
            "mdsfair.fairseq_patches",
        ),
    ),
    ("modules", ("mdsfair.modules", "mdsfair.component_table")),
    ("generation", ("mdsfair.generation",)),
    ("models", ("mdsfair.models", "mdsfair.criterions")),
    ("preprocess", ("mdsfair.preprocess",)),
    ("tasks", ("mdsfair.tasks",)),
    (
        "applications",
        ("mdsfair.hub_interface", "mdsfair.importers", "mdsfair.cli", "mdsfair.cli_help", "mdsfair.cli_help_table"),
    ),
    ("evaluation", ("mdsfair.evaluation",)),
]

#: Upward imports allowed by name, each inside a function or the ``__main__``
#: block (never when the module is imported), with the reason.
ALLOWED_UPWARD = {
    # A model class's from_pretrained returns the hub interface (which needs
    # tasks and preprocessing), as fairseq's BARTModel.from_pretrained imports
    # its BARTHubInterface: imported when a model is loaded, never at import.
    ("mdsfair.models.hub", "mdsfair.hub_interface"),
    # The task's --eval-rouge scores validation summaries with the evaluation
    # layer's scorer, as fairseq's translation task scores --eval-bleu with
    # sacrebleu: imported when the flag is on, never at import.
    ("mdsfair.tasks.eval_rouge", "mdsfair.evaluation.validation_rouge"),
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
    """``{module name: (path, source)}`` of every module of the package
    mdsfair, as Python finds it: ``mdsfair/preprocess`` is a link to the
    top-level ``preprocess/`` folder, whose modules are listed under their one
    name ``mdsfair.preprocess...`` with their real path."""
    sources = {}
    package_root = os.path.join(REPO_ROOT, "mdsfair")
    for directory, subdirectories, files in os.walk(package_root, followlinks=True):
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith((".", "__pycache__")))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            parts = os.path.relpath(path, package_root)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            module = ".".join(["mdsfair"] + parts)
            with open(path, encoding="utf-8") as handle:
                sources[module] = (os.path.relpath(os.path.realpath(path), REPO_ROOT), handle.read())
    return sources


def is_package(module: str, sources: Dict[str, Tuple[str, str]]) -> bool:
    return sources[module][0].endswith("__init__.py")


def is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``"""
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and len(node.test.ops) == 1
        and isinstance(node.test.ops[0], ast.Eq)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        and isinstance(node.test.comparators[0], ast.Constant)
        and node.test.comparators[0].value == "__main__"
    )


#: When an import runs: when the module is imported (its body, ifs and trys
#: included), when a function is called, or only when the file runs as a
#: program (``python -m``: its ``if __name__ == "__main__":`` block).
AT_IMPORT, AT_CALL, AS_PROGRAM = "import", "call", "program"


def imported_modules(module: str, sources) -> Iterator[Tuple[str, int, str]]:
    """``(imported mdsfair module, line, when)`` of every import in
    ``module`` (when: :data:`AT_IMPORT`, :data:`AT_CALL` or
    :data:`AS_PROGRAM`); ``from package import name`` counts as
    ``package.name`` when that is a module."""
    path, source = sources[module]
    tree = ast.parse(source, path)
    top_level = {id(node) for node in tree.body}
    as_program = set()
    for node in tree.body:  # imports guarded by if/try at module level are module level too
        if is_main_guard(node):
            as_program.update(id(child) for child in ast.walk(node) if child is not node)
        elif isinstance(node, (ast.If, ast.Try)):
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
            names = [
                f"{target}.{alias.name}" if f"{target}.{alias.name}" in sources else target for alias in node.names
            ]
        else:
            continue
        for name in names:
            if name == "mdsfair" or name.startswith("mdsfair."):
                while name not in sources and "." in name:  # an attribute of a module: the module
                    name = name.rsplit(".", 1)[0]
                when = AS_PROGRAM if id(node) in as_program else AT_IMPORT if id(node) in top_level else AT_CALL
                yield name, node.lineno, when


def layering_violations(sources) -> List[str]:
    """Every import that points to a higher layer (and is not allowed by
    name, or is allowed but runs when the module is imported)."""
    problems = []
    for module in sorted(sources):
        own = layer_of(module)
        if own is None:
            problems.append(f"{sources[module][0]}: module {module} belongs to no layer of ARCHITECTURE.md")
            continue
        for imported, line, when in imported_modules(module, sources):
            target = layer_of(imported)
            allowed = (module, imported) in ALLOWED_UPWARD and when != AT_IMPORT
            if target is not None and target > own and not allowed:
                problems.append(
                    f"{sources[module][0]}:{line}: {module} (layer {LAYERS[own][0]}) imports {imported} "
                    f"(layer {LAYERS[target][0]}, above it)"
                )
    return problems


def import_cycles(sources, module_level_only: bool = True) -> List[List[str]]:
    """Cycles of imports (strongly connected components of more than one
    module, or a module importing itself), each sorted; of module-level
    imports only, or of every import (lazy ones too). The imports of an ``if
    __name__ == "__main__":`` block are edges too: ``python -m`` runs the file
    as ``__main__``, and a module it imports that imports it back runs the
    file a second time, under its own name."""
    graph: Dict[str, Set[str]] = {module: set() for module in sources}
    for module in sources:
        for imported, _, when in imported_modules(module, sources):
            if (when in (AT_IMPORT, AS_PROGRAM) or (when == AT_CALL and not module_level_only)) and imported in sources:
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


#: fairseq's top-level packages: the library and its command-line programs.
FAIRSEQ_PACKAGES = ("fairseq", "fairseq_cli")


def fairseq_patches_outside_their_file(sources) -> List[str]:
    """Assignments to an attribute of a fairseq module or object outside
    :data:`PATCH_MODULE` (``fairseq.x.y = ...``, ``generate.main = ...`` after
    ``from fairseq_cli import generate``, ``setattr(x, ...)`` where ``x`` was
    imported from fairseq or fairseq_cli)."""
    problems = []
    for module in sorted(sources):
        if module == PATCH_MODULE:
            continue
        path, source = sources[module]
        tree = ast.parse(source, path)
        fairseq_names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                fairseq_names.update(
                    (a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in FAIRSEQ_PACKAGES
                )
            elif (
                isinstance(node, ast.ImportFrom)
                and not node.level
                and (node.module or "").split(".")[0] in FAIRSEQ_PACKAGES
            ):
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
                    problems.append(
                        f"{path}:{node.lineno}: assigns to fairseq's {ast.unparse(target)} "
                        f"(patches of fairseq belong in {PATCH_MODULE})"
                    )
    return problems


#: Where ``preprocess/`` is the package ``mdsfair.preprocess``: a link, the one
#: mechanism (no ``package_dir`` in setup.py, no aliasing at import).
PREPROCESS_LINK = os.path.join("mdsfair", "preprocess")


def repository_python_files() -> Iterator[Tuple[str, str]]:
    """``(path relative to the repository, source)`` of every Python file of
    the checkout (package, tests, benchmarks, tools, examples, hubconf.py,
    setup.py), links not followed (so each file is read once)."""
    skipped = {"__pycache__", "build", "dist", "node_modules"}
    for directory, subdirectories, files in os.walk(REPO_ROOT):
        subdirectories[:] = sorted(
            d for d in subdirectories if not d.startswith(".") and d not in skipped and not d.endswith(".egg-info")
        )
        for name in sorted(files):
            path = os.path.join(directory, name)
            if name.endswith(".py") and not os.path.islink(path):
                with open(path, encoding="utf-8") as handle:
                    yield os.path.relpath(path, REPO_ROOT), handle.read()


def bare_preprocess_imports(files: Iterator[Tuple[str, str]]) -> List[str]:
    """Every import of the top-level folder by its bare name (``import
    preprocess``, ``from preprocess.x import y``): its modules have one name,
    ``mdsfair.preprocess...``."""
    problems = []
    for path, source in files:
        for node in ast.walk(ast.parse(source, path)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if name == "preprocess" or name.startswith("preprocess."):
                    problems.append(f"{path}:{node.lineno}: imports {name}; its name is mdsfair.{name}")
    return problems


def import_time_aliasing(sources) -> List[str]:
    """Module aliasing and search-path surgery in mdsfair's modules: a write
    into ``sys.modules`` (``sys.modules[name] = ...``, ``.update``,
    ``.setdefault``, ``.__setitem__``) or to a package's ``__path__``
    (assignment, ``.append`` / ``.extend`` / ``.insert``). Where a module is,
    is what the file system says."""
    problems = []
    for module in sorted(sources):
        path, source = sources[module]
        for node in ast.walk(ast.parse(source, path)):
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("update", "setdefault", "__setitem__", "append", "extend", "insert")
            ):
                targets = [node.func.value]
            for target in targets:
                while isinstance(target, ast.Subscript):
                    target = target.value
                text = ast.unparse(target)
                if text in ("sys.modules", "__path__") or text.endswith(".__path__"):
                    problems.append(f"{path}:{node.lineno}: writes to {text} (no module aliasing at import)")
    return problems


def setup_keywords() -> Dict[str, ast.expr]:
    """The keyword arguments of the ``setup()`` call of setup.py."""
    with open(os.path.join(REPO_ROOT, "setup.py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), "setup.py")
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setup"
    ]
    assert len(calls) == 1
    return {keyword.arg: keyword.value for keyword in calls[0].keywords}


#: Documents cited by a Python file that the repository does not have, each
#: with the reason it is still cited (the citing file is being rewritten).
KNOWN_MISSING_DOCUMENTS = set()

_CITED_DOCUMENT = re.compile(r"(?<![\w/.-])((?:\.\./|[\w-]+/)*[\w.-]+\.md)\b")


def missing_documents(files: Iterator[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """``(file, document)`` for every Markdown document (``ARCHITECTURE.md``,
    ``docs/data_contract.md``, ...) a Python file cites that is not in the
    repository (paths from the repository's root)."""
    return sorted(
        {
            (path, match.group(1))
            for path, source in files
            for match in _CITED_DOCUMENT.finditer(source)
            if not os.path.exists(os.path.join(REPO_ROOT, match.group(1)))
        }
    )


# ------------------------------------------------------------------ tests


def test_every_import_points_down_the_layers():
    assert layering_violations(repository_sources()) == []


def test_imports_form_no_cycle():
    sources = repository_sources()
    assert import_cycles(sources) == []
    # lazy (function-level) imports form none either: the preprocessing config is
    # one dataclass (mdsfair.preprocess.config) that the command and the hub both use
    assert import_cycles(sources, module_level_only=False) == []


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
    bad = synthetic(
        {
            # a module that imports a task (two layers up), lazily
            "mdsfair.modules.bad_attention": "def f():\n    from mdsfair.tasks.model_inputs import unwrap_model\n",
            # the text layer importing evaluation, at module level
            "mdsfair.text_bad": "from mdsfair.evaluation import rouge\n",
            # a relative import from models up to the hub
            "mdsfair.models.bad_model": "from ..hub_interface import HUB_ENTRIES\n",
        }
    )
    problems = layering_violations(bad)
    assert problems == [
        "mdsfair/models/bad_model.py:1: mdsfair.models.bad_model (layer models) imports mdsfair.hub_interface "
        "(layer applications, above it)",
        "mdsfair/modules/bad_attention.py:2: mdsfair.modules.bad_attention (layer modules) imports "
        "mdsfair.tasks.model_inputs (layer tasks, above it)",
        "mdsfair/text_bad.py:1: mdsfair.text_bad (layer foundation) imports mdsfair.evaluation.rouge "
        "(layer evaluation, above it)",
    ]
    # an upward import allowed by name runs only in a function or as the program, never at import
    allowed_at_import = synthetic({"mdsfair.models.hub": "from mdsfair.hub_interface import HUB_ENTRIES\n"})
    assert layering_violations(allowed_at_import) == [
        "mdsfair/models/hub.py:1: mdsfair.models.hub (layer models) imports mdsfair.hub_interface "
        "(layer applications, above it)"
    ]
    as_program = synthetic(
        {
            "mdsfair.text_main": "import sys\nif __name__ == '__main__':\n    from mdsfair.evaluation import rouge\n",
            "mdsfair.evaluation.runner": "import mdsfair.evaluation.runner_cli\n",
            "mdsfair.evaluation.runner_cli": (
                "from mdsfair.evaluation import runner\nif __name__ == '__main__':\n    import mdsfair.evaluation.runner\n"
            ),
        }
    )
    assert layering_violations(as_program) == [
        "mdsfair/text_main.py:3: mdsfair.text_main (layer foundation) imports mdsfair.evaluation.rouge "
        "(layer evaluation, above it)"
    ]
    assert [c for c in import_cycles(as_program, module_level_only=False) if "runner" in c[0]] == [
        ["mdsfair.evaluation.runner", "mdsfair.evaluation.runner_cli"]
    ]
    # a program whose __main__ block imports its command, which imports the program's module back:
    # `python -m` would run the file twice (as __main__, then under its name)
    handed_over = synthetic(
        {
            "mdsfair.evaluation.program": "import sys\nif __name__ == '__main__':\n    from mdsfair.evaluation import program_cli\n",
            "mdsfair.evaluation.program_cli": "from mdsfair.evaluation.program import score\n",
        }
    )
    assert [c for c in import_cycles(handed_over) if "program" in c[0]] == [
        ["mdsfair.evaluation.program", "mdsfair.evaluation.program_cli"]
    ]
    cyclic = synthetic(
        {
            "mdsfair.evaluation.cycle_a": "from mdsfair.evaluation import cycle_b\n",
            "mdsfair.evaluation.cycle_b": "import mdsfair.evaluation.cycle_a\n",
            "mdsfair.evaluation.lazy_a": "def f():\n    from mdsfair.evaluation import lazy_b\n",
            "mdsfair.evaluation.lazy_b": "import mdsfair.evaluation.lazy_a\n",
        }
    )
    assert import_cycles(cyclic) == [["mdsfair.evaluation.cycle_a", "mdsfair.evaluation.cycle_b"]]
    assert [c for c in import_cycles(cyclic, module_level_only=False) if "evaluation" in c[0]] == [
        ["mdsfair.evaluation.cycle_a", "mdsfair.evaluation.cycle_b"],
        ["mdsfair.evaluation.lazy_a", "mdsfair.evaluation.lazy_b"],
    ]
    patched = synthetic(
        {
            "mdsfair.models.sneaky": (
                "from fairseq import checkpoint_utils\nimport fairseq.utils as fu\n"
                "checkpoint_utils.load_checkpoint_to_cpu = print\n"
                "def f():\n    setattr(fu, 'x', 1)\n"
            ),
            # the form mdsfair.cli once used: a fairseq_cli module's attribute, inside a function
            "mdsfair.cli_sneaky": (
                "def main():\n    from fairseq_cli import generate\n    import fairseq_cli.train\n"
                "    generate.main = print\n    fairseq_cli.train.main = print\n"
            ),
        }
    )
    assert fairseq_patches_outside_their_file(patched) == [
        "mdsfair/cli_sneaky.py:4: assigns to fairseq's generate.main (patches of fairseq belong in "
        "mdsfair.fairseq_patches)",
        "mdsfair/cli_sneaky.py:5: assigns to fairseq's fairseq_cli.train.main (patches of fairseq belong in "
        "mdsfair.fairseq_patches)",
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


def test_preprocess_is_mdsfair_preprocess_by_one_plain_mechanism():
    """``mdsfair/preprocess`` is a link to the top-level ``preprocess/``: the
    one way it becomes ``mdsfair.preprocess`` (for Python, static tools and
    setuptools' find_packages alike); setup.py maps no package directory and
    no module aliases modules at import."""
    link = os.path.join(REPO_ROOT, PREPROCESS_LINK)
    assert os.path.islink(link) and os.readlink(link) == os.path.join(os.pardir, "preprocess")
    assert os.path.realpath(link) == os.path.realpath(os.path.join(REPO_ROOT, "preprocess"))
    keywords = setup_keywords()
    assert "package_dir" not in keywords
    assert ast.unparse(keywords["packages"]) == "find_packages(include=['mdsfair', 'mdsfair.*'])"
    sources = repository_sources()
    assert {"mdsfair.preprocess.binarize", "mdsfair.preprocess.converters.common"} <= set(sources)
    assert sources["mdsfair.preprocess.binarize"][0] == os.path.join("preprocess", "binarize.py")
    assert import_time_aliasing(sources) == []


def test_preprocess_has_one_spelling():
    """No file imports the bare ``preprocess``; every console script names a
    module of mdsfair."""
    assert bare_preprocess_imports(repository_python_files()) == []
    scripts = ast.literal_eval(setup_keywords()["entry_points"])["console_scripts"]
    assert scripts and all(script.split("=")[1].strip().startswith("mdsfair.") for script in scripts)


def test_spelling_and_aliasing_checks_fail_on_synthetic_bad_modules():
    assert bare_preprocess_imports(
        [
            (
                "tests/test_bad.py",
                "import preprocess.binarize\nfrom preprocess import pipeline\nfrom . import preprocess\n",
            ),
        ]
    ) == [
        "tests/test_bad.py:1: imports preprocess.binarize; its name is mdsfair.preprocess.binarize",
        "tests/test_bad.py:2: imports preprocess; its name is mdsfair.preprocess",
    ]
    aliasing = synthetic(
        {
            "mdsfair.alias_a": "import sys\nsys.modules['mdsfair.preprocess'] = object()\n",
            "mdsfair.alias_b": "import sys, os\ndef f():\n    sys.modules.setdefault('x', None)\n",
            "mdsfair.alias_c": "__path__.append('../preprocess')\n",
        }
    )
    assert [problem for problem in import_time_aliasing(aliasing) if "alias_" in problem] == [
        "mdsfair/alias_a.py:2: writes to sys.modules (no module aliasing at import)",
        "mdsfair/alias_b.py:3: writes to sys.modules (no module aliasing at import)",
        "mdsfair/alias_c.py:1: writes to __path__ (no module aliasing at import)",
    ]


def test_docstrings_cite_documents_the_repository_has():
    this_file = os.path.relpath(os.path.abspath(__file__), REPO_ROOT)  # its synthetic citations below
    files = [(path, source) for path, source in repository_python_files() if path != this_file]
    assert missing_documents(files) == sorted(KNOWN_MISSING_DOCUMENTS)
    assert missing_documents([("mdsfair/x.py", '"""The raw contract (DESIGN.md; README.md)."""')]) == [
        ("mdsfair/x.py", "DESIGN.md")
    ]


_REGISTERS_A_MODEL = re.compile(r"^@register_model\(", re.M)


def model_files_importing_model_files(sources) -> List[str]:
    """Imports of one model file (a module of ``mdsfair.models`` that
    registers a model with ``@register_model``) by another (issue 31: shared
    plumbing lives in the helpers of ``mdsfair.models`` and in
    ``mdsfair.modules``, not in another system's file)."""
    model_files = {
        module
        for module, (_path, source) in sources.items()
        if module.startswith("mdsfair.models.") and _REGISTERS_A_MODEL.search(source)
    }
    found = []
    for module in sorted(model_files):
        for imported, line, _when in imported_modules(module, sources):
            if imported in model_files and imported != module:
                found.append(f"{sources[module][0]}:{line} imports the model file {imported}")
    return found


def test_no_model_file_imports_another():
    sources = repository_sources()
    assert (
        len([m for m, (_p, s) in sources.items() if m.startswith("mdsfair.models.") and _REGISTERS_A_MODEL.search(s)])
        >= 7
    )
    assert model_files_importing_model_files(sources) == []
    bad = synthetic(
        {
            "mdsfair.models.bad_system": '@register_model("bad")\nclass Bad:\n    pass\n'
            "from mdsfair.models.led import LEDModel\n"
        }
    )
    assert model_files_importing_model_files(bad) == [
        "mdsfair/models/bad_system.py:4 imports the model file mdsfair.models.led"
    ]


def reference_modules_importing_the_speed_ups(sources) -> List[str]:
    """Imports of :mod:`mdsfair.generation.fast` (the decoding speed-ups) by
    a module of :mod:`mdsfair.modules` or :mod:`mdsfair.models`: the
    reference layers and models state each algorithm once, and the
    generator swaps the speed-ups in (``make_generation_fast_``)."""
    found = []
    for module in sorted(sources):
        if not module.startswith(("mdsfair.modules.", "mdsfair.models.")) and module not in (
            "mdsfair.modules",
            "mdsfair.models",
        ):
            continue
        for name, line, _when in imported_modules(module, sources):
            if name == "mdsfair.generation.fast" or name.startswith("mdsfair.generation.fast."):
                found.append(f"{sources[module][0]}:{line} imports {name}")
    return found


def test_no_reference_module_imports_the_decoding_speed_ups():
    sources = repository_sources()
    assert "mdsfair.generation.fast" in sources and "mdsfair.modules.transformer_layers" in sources
    assert reference_modules_importing_the_speed_ups(sources) == []
    bad = synthetic({"mdsfair.modules.bad_layer": "from mdsfair.generation.fast.step_linear import step_linear\n"})
    assert reference_modules_importing_the_speed_ups(bad) == [
        "mdsfair/modules/bad_layer.py:1 imports mdsfair.generation.fast.step_linear"
    ]
