"""The environment install.sh makes: transformers' BART and LED import with
nothing hidden, and `pip check` reports nothing but the one documented line."""
import subprocess
import sys

#: The one line `pip check` may print after install.sh (README, Set-up): fairseq
#: declares torchaudio for its speech tasks, install.sh removes it because every
#: torchaudio wheel on the registry is a CUDA build that cannot load here.
DOCUMENTED_PIP_CHECK_LINE = "requires torchaudio, which is not installed."


def test_transformers_bart_and_led_import_in_a_fresh_process():
    code = (
        "import transformers, fairseq, mdsfair, sys\n"
        "from transformers import BartForConditionalGeneration, LEDForConditionalGeneration\n"
        "assert sys.modules.get('torchaudio', True) is not None  # nothing hid a broken torchaudio\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_pip_check_reports_only_the_documented_line():
    result = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    problems = [line for line in result.stdout.splitlines() if line.strip() and line != "No broken requirements found."]
    unexpected = [line for line in problems if not (line.startswith("ve-fairseq ") and line.endswith(DOCUMENTED_PIP_CHECK_LINE))]
    assert not unexpected, "\n".join(unexpected)
