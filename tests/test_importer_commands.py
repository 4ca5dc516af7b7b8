"""``mdsfair-import`` / ``mdsfair-export`` as the console scripts run them: a
fresh interpreter that imports ``mdsfair`` before fairseq, so nothing is
registered and fairseq's checkpoint loads have no allow-list until the
command calls :func:`mdsfair.register`. (In this test process fairseq and
mdsfair are registered already, which hid a missing call.)"""

import json
import os
import subprocess
import sys

import pytest

from mdsfair.importers.bart_to_led import convert_bart_to_led
from mdsfair.importers.hf_bart import import_hf_bart
from tests.import_fixtures import import_transformers, tiny_hf_bart
from tests.utils import REPO_ROOT

#: the console scripts' entry points (setup.py), run as they are: ``sys.exit(main())``
ENTRY_POINTS = {"mdsfair-import": "import_main", "mdsfair-export": "export_main"}


def run_command(program, *arguments):
    """``program arguments`` in a fresh interpreter on this checkout; returns
    stdout, fails with stderr."""
    code = (
        f"import sys\nfrom mdsfair.importers.cli import {ENTRY_POINTS[program]} as main\n"
        f"sys.argv[0] = {program!r}\nsys.exit(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": REPO_ROOT, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, *arguments], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    """A tiny imported BART (model.pt, dict.txt) and, converted in this
    process, its led checkpoint ``led.pt`` (encoder positions 200, window 8)."""
    import_transformers()
    root = tmp_path_factory.mktemp("bart")
    hf_dir, out_dir = str(root / "hf"), str(root / "out")
    tiny_hf_bart(hf_dir, seed=5)
    import_hf_bart(hf_dir, out_dir)
    convert_bart_to_led(os.path.join(out_dir, "model.pt"), os.path.join(out_dir, "led.pt"), 200, "8")
    return out_dir


def test_import_bart_to_led_in_a_fresh_process(bart, tmp_path):
    led = str(tmp_path / "led.pt")
    printed = run_command(
        "mdsfair-import",
        "bart-to-led",
        os.path.join(bart, "model.pt"),
        led,
        "--max-source-positions",
        "200",
        "--attention-window",
        "8",
    )
    assert "--restore-file" in printed
    import torch

    written, expected = (
        torch.load(path, map_location="cpu", weights_only=False)["model"]
        for path in (led, os.path.join(bart, "led.pt"))
    )
    assert written.keys() == expected.keys()
    assert all(torch.equal(written[key], expected[key]) for key in expected)


def test_export_hf_led_in_a_fresh_process(bart, tmp_path):
    hf_dir = str(tmp_path / "hf")
    run_command("mdsfair-export", "hf-led", os.path.join(bart, "led.pt"), os.path.join(bart, "dict.txt"), hf_dir)
    with open(os.path.join(hf_dir, "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "led" and config["max_encoder_position_embeddings"] == 200
    assert config["attention_window"] == [8, 8]
