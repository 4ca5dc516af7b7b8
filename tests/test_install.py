"""The environment install.sh makes: transformers' BART and LED import with
nothing hidden, `pip check` reports nothing, and the fairseq wheel rewrite
that makes this possible changes nothing but fairseq's torchaudio requirement."""

import base64
import hashlib
import importlib.metadata
import os
import subprocess
import sys
import zipfile

import pytest

from tests.utils import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))
import fairseq_wheel_audio_extra  # noqa: E402  (tools/ is no package)


def test_transformers_bart_and_led_import_in_a_fresh_process():
    code = (
        "import transformers, fairseq, mdsfair, sys\n"
        "from transformers import BartForConditionalGeneration, LEDForConditionalGeneration\n"
        "assert sys.modules.get('torchaudio', True) is not None  # nothing hid a broken torchaudio\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_pip_check_reports_nothing():
    result = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "No broken requirements found.", result.stdout


def test_installed_fairseq_needs_torchaudio_only_for_its_audio_extra():
    requirements = importlib.metadata.requires("ve-fairseq")
    torchaudio = [line for line in requirements if line.startswith("torchaudio")]
    assert torchaudio == ['torchaudio>=0.8.0; extra == "audio"']
    assert "audio" in importlib.metadata.metadata("ve-fairseq").get_all("Provides-Extra")


METADATA = """Metadata-Version: 2.4
Name: ve-fairseq
Version: 0.12.3
Requires-Dist: torch>=1.13
Requires-Dist: torchaudio>=0.8.0
Requires-Dist: scikit-learn
Provides-Extra: dev
Requires-Dist: pytest; extra == "dev"

<p>the description, where "Requires-Dist: torchaudio" may appear in prose</p>
"""


def write_wheel(path, metadata):
    files = {"fairseq/__init__.py": b"version = '0.12.3'\n", "ve_fairseq-0.12.3.dist-info/METADATA": metadata.encode()}

    def record_line(name, data):
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"{name},sha256={digest},{len(data)}"

    record = "\n".join([record_line(n, d) for n, d in files.items()] + ["ve_fairseq-0.12.3.dist-info/RECORD,,"]) + "\n"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("ve_fairseq-0.12.3.dist-info/RECORD", record)


def test_wheel_rewrite_changes_only_the_torchaudio_requirement_and_its_record(tmp_path):
    source = tmp_path / "in" / "ve_fairseq-0.12.3-cp311-cp311-manylinux_2_28_x86_64.whl"
    source.parent.mkdir()
    write_wheel(source, METADATA)
    (tmp_path / "out").mkdir()
    target = fairseq_wheel_audio_extra.rewrite(str(source), str(tmp_path / "out"))
    assert os.path.basename(target) == source.name
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target) as new:
        assert old.namelist() == new.namelist()
        assert new.read("fairseq/__init__.py") == old.read("fairseq/__init__.py")
        metadata = new.read("ve_fairseq-0.12.3.dist-info/METADATA").decode()
        expected = METADATA.replace(
            "Requires-Dist: torchaudio>=0.8.0\n", 'Requires-Dist: torchaudio>=0.8.0; extra == "audio"\n'
        )
        expected = expected.replace(
            'Requires-Dist: pytest; extra == "dev"\n', 'Requires-Dist: pytest; extra == "dev"\nProvides-Extra: audio\n'
        )
        assert metadata == expected
        record = dict(
            line.split(",", 1) for line in new.read("ve_fairseq-0.12.3.dist-info/RECORD").decode().splitlines()
        )
        digest = base64.urlsafe_b64encode(hashlib.sha256(metadata.encode()).digest()).rstrip(b"=").decode()
        assert record["ve_fairseq-0.12.3.dist-info/METADATA"] == f"sha256={digest},{len(metadata.encode())}"


def test_wheel_rewrite_refuses_a_wheel_it_does_not_know(tmp_path):
    source = tmp_path / "ve_fairseq-0.12.4-py3-none-any.whl"
    write_wheel(source, METADATA.replace("Requires-Dist: torchaudio>=0.8.0\n", ""))
    (tmp_path / "out").mkdir()
    with pytest.raises(SystemExit, match="0 unconditional torchaudio requirements"):
        fairseq_wheel_audio_extra.rewrite(str(source), str(tmp_path / "out"))
    assert os.listdir(tmp_path / "out") == []
