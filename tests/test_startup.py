"""Start-up: the commands that need no model import
neither torch nor fairseq, ``--help`` of every command imports neither, and
mdsfair still registers everything with fairseq whenever fairseq is in use,
whatever the import order.

Each check runs in a fresh interpreter (``sys.modules`` of this test process
already holds torch) and checks which modules it imported, not how long it
took: ``benchmarks/startup.py`` times the commands."""

import ast
import json
import os
import subprocess
import sys

import pytest

from tests.utils import REPO_ROOT

#: module of each command that needs no model (setup.py's entry points)
LIGHT_COMMANDS = {
    "mdsfair-rouge": "mdsfair.evaluation.rouge",
    "mdsfair-compare": "mdsfair.evaluation.compare",
    "mdsfair-baseline": "mdsfair.evaluation.baselines",
    "mdsfair-human-eval": "mdsfair.evaluation.human_eval",
    "mdsfair-convert": "mdsfair.preprocess.converters",
    "mdsfair-synth": "mdsfair.preprocess.synthetic",
}
#: modules the light commands import
LIGHT_MODULES = sorted(
    set(LIGHT_COMMANDS.values())
    | {
        "mdsfair",
        "mdsfair.evaluation.fairseq_output",
        "mdsfair.text",
        "mdsfair.evaluation.rouge155",
    }
)


def console_scripts() -> dict:
    """setup.py's console scripts: ``{command: "module:function"}``."""
    with open(os.path.join(REPO_ROOT, "setup.py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    entry_points = next(
        ast.literal_eval(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.keyword) and node.arg == "entry_points"
    )
    return dict(tuple(part.strip() for part in line.split("=")) for line in entry_points["console_scripts"])


def run_python(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_light_modules_import_neither_torch_nor_fairseq():
    code = (
        "import importlib, sys\n"
        f"for name in {LIGHT_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "heavy = sorted(m for m in ('torch', 'fairseq', 'numpy.random', 'spacy') if m in sys.modules)\n"
        "print('heavy:', heavy)\n"
    )
    assert run_python(code).strip() == "heavy: []"


def test_the_light_commands_are_console_scripts_of_their_modules():
    scripts = console_scripts()
    assert {command: scripts[command].split(":")[0] for command in LIGHT_COMMANDS} == LIGHT_COMMANDS
    assert {"mdsfair-train", "mdsfair-generate"} <= set(scripts)


@pytest.mark.parametrize("command", sorted(console_scripts()))
def test_help_of_every_command_imports_neither_torch_nor_fairseq(command):
    """``COMMAND --help`` as its console script runs it (setup.py's entry point), the
    model commands included: ``mdsfair-train`` / ``-generate`` print mdsfair's short help."""
    module, function = console_scripts()[command].split(":")
    code = (
        "import sys\n"
        f"sys.argv = [{command!r}, '--help']\n"
        f"from {module} import {function}\n"
        "try:\n"
        f"    status = {function}()\n"
        "except SystemExit as exit:\n"
        "    status = exit.code\n"
        "assert status in (0, None), status\n"
        "print('\\nRESULT', 'torch' in sys.modules, 'fairseq' in sys.modules)\n"
    )
    output = run_python(code)
    assert "usage:" in output
    assert output.strip().splitlines()[-1].split() == ["RESULT", "False", "False"], output[-2000:]


REGISTRY_CHECK = (
    "from fairseq.tasks import TASK_REGISTRY\n"
    "from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY\n"
    "from fairseq.criterions import CRITERION_REGISTRY\n"
    "from fairseq import checkpoint_utils\n"
    "import mdsfair\n"
    "from mdsfair.hub_interface import HUB_ENTRIES\n"
    "print('tasks', all(t in TASK_REGISTRY for t in ('multidoc_summarization', 'multidoc_summarization_sparse', "
    "'paragraph_ranking')))\n"
    "print('models', all(m in MODEL_REGISTRY for m in ('hiertransformer', 'dape_transformer', 'pagesum_bart', "
    "'sparse_bart', 'hierencdec_bart', 'led')))\n"
    "print('archs', all(a in ARCH_MODEL_REGISTRY for a in ('hiertransformer_hiersumm', 'dape_transformer', "
    "'pagesum_bart_large', 'sparse_bart_base', 'hierencdec_bart_large', 'paragraph_ranker', 'primera')))\n"
    "print('criterions', all(c in CRITERION_REGISTRY for c in ('sparse_kl', 'paragraph_ranking')))\n"
    "print('hub', sorted(HUB_ENTRIES) == sorted(['bart', 'dape_transformer', 'hat_bart', 'hepos_bart', "
    "'hierencdec_bart', 'hiertransformer', 'led', 'lobart', 'longt5', 'multidoc_bart', 'pagesum_bart', 'pegasus', "
    "'sparse_bart', 'summarizer', 't5_v1_1', 'tdmca', 'transformer']))\n"
    "print('checkpoint hooks', getattr(checkpoint_utils.load_checkpoint_to_cpu, '__mdsfair_checked__', False))\n"
    "print('registered', mdsfair.is_registered())\n"
)


@pytest.mark.parametrize(
    "first_import",
    [
        "import mdsfair\nimport fairseq\nmdsfair.register()\n",  # plugin first, fairseq later: explicit register()
        "import fairseq\nimport mdsfair\n",  # fairseq first, as its --user-dir imports mdsfair
        # fairseq's own --user-dir mechanism (what fairseq-train --user-dir mdsfair runs)
        "import argparse\nfrom fairseq import utils\nutils.import_user_module(argparse.Namespace(user_dir='mdsfair'))\n",
        "from mdsfair.hub_interface import HUB_ENTRIES\n",  # the hub registers explicitly
        "import hubconf\n",  # torch.hub's entry file
    ],
)
@pytest.mark.slow
def test_registries_are_filled_whatever_the_import_order(first_import):
    output = run_python(first_import + REGISTRY_CHECK)
    assert output.split() == [
        "tasks",
        "True",
        "models",
        "True",
        "archs",
        "True",
        "criterions",
        "True",
        "hub",
        "True",
        "checkpoint",
        "hooks",
        "True",
        "registered",
        "True",
    ], output


def test_importing_mdsfair_changes_nothing_in_fairseq_warnings_or_the_import_system():
    """No import-time magic: ``import mdsfair`` before fairseq installs no
    import hook, patches nothing and registers nothing until ``register()``,
    and never touches the process's warning filters."""
    code = (
        "import sys, warnings\n"
        "filters_before, meta_path_before = list(warnings.filters), list(sys.meta_path)\n"
        "import mdsfair\n"
        "print('filters', warnings.filters == filters_before)\n"
        "print('meta_path', sys.meta_path == meta_path_before)\n"
        "import fairseq\n"
        "from fairseq import checkpoint_utils\n"
        "from fairseq.models import MODEL_REGISTRY\n"
        "print('patched', getattr(checkpoint_utils.load_checkpoint_to_cpu, '__mdsfair_checked__', False))\n"
        "print('models', 'pagesum_bart' in MODEL_REGISTRY, mdsfair.is_registered())\n"
        "filters_before = list(warnings.filters)\n"
        "mdsfair.register()\n"
        "silenced = [f for f in warnings.filters if f[1] is not None and 'hydra' in f[1].pattern]\n"
        "print('after', 'pagesum_bart' in MODEL_REGISTRY, mdsfair.is_registered(), silenced == [])\n"
    )
    assert run_python(code).split() == [
        "filters",
        "True",
        "meta_path",
        "True",
        "patched",
        "False",
        "models",
        "False",
        "False",
        "after",
        "True",
        "True",
        "True",
    ]


def test_the_startup_benchmark_runs_every_console_script_and_refuses_an_unknown_one():
    from benchmarks import startup

    runs = startup.runs_to_measure(None)
    assert list(runs)[:2] == [startup.INTERPRETER, startup.TORCH_FAIRSEQ]
    assert {f"{command} --help" for command in console_scripts()} | {
        "mdsfair-train --help-all",
        "mdsfair-generate --help-all",
    } == set(runs) - set(startup.BASELINES)
    assert "from mdsfair.cli import train_main" in runs["mdsfair-train --help"]
    with pytest.raises(SystemExit, match=r"--commands: \['mdsfair-nope'\] are not console scripts"):
        startup.runs_to_measure(["mdsfair-rouge", "mdsfair-nope"])


@pytest.mark.slow
def test_the_startup_benchmark_writes_a_results_file_with_both_baselines(tmp_path):
    from benchmarks import results

    path = tmp_path / "startup.json"
    command = [sys.executable, "benchmarks/startup.py", "--commands", "mdsfair-rouge", "--repeats", "1"]
    finished = subprocess.run(command + ["--json", str(path)], cwd=REPO_ROOT, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-3000:]
    record = json.loads(path.read_text(encoding="utf-8"))
    assert results.problems(record) == []
    rows = {row["command"]: row for row in record["rows"]}
    assert list(rows) == ["python -c pass", 'python -c "import torch, fairseq"', "mdsfair-rouge --help"]
    assert rows['python -c "import torch, fairseq"']["imports_fairseq"]
    assert not rows["mdsfair-rouge --help"]["imports_torch"] and not rows["mdsfair-rouge --help"]["imports_fairseq"]
    assert "load average" in record["notes"] and record["load_average_end"] is not None
