#!/usr/bin/env bash
# DAPE on the synthetic data set: full model, each Table III ablation and the flat
# transformer, trained for the same number of updates, scored with ROUGE-1/2/SU4 from
# the official ROUGE-1.5.5 script (the paper's metrics).
#
#   bash examples/dape/run_synthetic_table.sh [OUT_DIR]      (default: ./dape_synthetic_out)
#
# Scale as examples/quickstart.sh (4,000 training clusters, d 128, 2 + 2 layers, beam 4).
# Environment overrides:
#   TRAIN_UPDATES=300    training budget per system in updates (fairseq --max-update): the
#                        same on every machine, so the table does not depend on its load
#   TRAIN_CLUSTERS=4000  size of the synthetic training split
#   TEST_CLUSTERS=100    size of the synthetic test split
#   WORKERS=2            preprocessing workers (one spaCy parser each)
# The systems are trained one after another, each on one intra-op thread; the final
# table lists the updates, the wall time each system took and the machine's load average
# (the wall time depends on the load, the scores do not). Re-running the script keeps
# finished systems (their generate.NAME.out) and the data; delete a system's outputs to
# retrain it.
set -euo pipefail
OUT="${1:-dape_synthetic_out}"
TRAIN_UPDATES="${TRAIN_UPDATES:-300}"
TRAIN_CLUSTERS="${TRAIN_CLUSTERS:-4000}"
TEST_CLUSTERS="${TEST_CLUSTERS:-100}"
WORKERS="${WORKERS:-2}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
mkdir -p "$OUT"

load() { cut -d ' ' -f 1-3 /proc/loadavg; }

echo "== 1. synthesize (seed 1): $TRAIN_CLUSTERS train / 100 valid / $TEST_CLUSTERS test clusters"
if [ ! -f "$OUT/raw/test.jsonl" ]; then
    mdsfair-synth --out-dir "$OUT/raw" --seed 1 --train "$TRAIN_CLUSTERS" --valid 100 --test "$TEST_CLUSTERS"
fi

echo "== 2. preprocess with spaCy dependency arcs (--side-data dep_head dep_rel, $WORKERS workers)"
if [ ! -f "$OUT/data-bin/mdsfair.json" ]; then
    start=$(date +%s)
    mdsfair-preprocess --input-dir "$OUT/raw" --destdir "$OUT/data-bin" --vocab-size 4000 \
        --spm-model-type bpe --side-data dep_head dep_rel --workers "$WORKERS" --no-progress-bar \
        > "$OUT/preprocess.log" 2>&1 || { tail -n 40 "$OUT/preprocess.log"; exit 1; }
    echo "preprocessing took $(( $(date +%s) - start )) s (load average now: $(load))"
fi

SMALL_MODEL=(--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 128 --decoder-embed-dim 128
             --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512
             --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings)
declare -A SYSTEM_ARGS=(
    [dape]="--arch dape_transformer"
    [dape_no_doc_pos]="--arch dape_transformer --no-doc-positions"
    [dape_no_dep]="--arch dape_transformer --no-dependency-encoding"
    [transformer]="--arch transformer"
)
SYSTEMS=(dape dape_no_doc_pos dape_no_dep transformer)

for name in "${SYSTEMS[@]}"; do
    if [ -s "$OUT/generate.$name.out" ]; then
        echo "== 3-4. $name: $OUT/generate.$name.out exists, kept (delete it to retrain)"
        continue
    fi
    rm -rf "$OUT/checkpoints/$name"
    echo "load average before: $(load)" > "$OUT/table.$name.load"
    echo "== 3. train $name (${SYSTEM_ARGS[$name]}, $TRAIN_UPDATES updates; load average before: $(load))"
    # shellcheck disable=SC2086  # the system's flags are word-split on purpose
    mdsfair-train "$OUT/data-bin" --task multidoc_summarization ${SYSTEM_ARGS[$name]} "${SMALL_MODEL[@]}" \
        --max-source-positions 512 --max-target-positions 128 --dropout 0.1 \
        --optimizer adam --adam-betas '(0.9, 0.998)' --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 200 \
        --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
        --max-tokens 8000 --max-update "$TRAIN_UPDATES" \
        --save-dir "$OUT/checkpoints/$name" --no-epoch-checkpoints --log-format simple --log-interval 50 \
        --num-workers 0 --seed 1 --cpu > "$OUT/train.$name.log" 2>&1 \
        || { tail -n 40 "$OUT/train.$name.log"; exit 1; }
    echo "load average after: $(load)" >> "$OUT/train.$name.log"
    grep -E "valid on 'valid'|done training" "$OUT/train.$name.log" | tail -n 2 | sed -e 's/^INFO:[a-z_.]*://'

    echo "== 4. generate $name (beam 4)"
    mdsfair-generate "$OUT/data-bin" --task multidoc_summarization \
        --path "$OUT/checkpoints/$name/checkpoint_last.pt" --gen-subset test \
        --max-source-positions 512 --max-target-positions 128 \
        --beam 4 --max-len-b 80 --batch-size 50 --post-process sentencepiece --cpu \
        > "$OUT/generate.$name.out" 2> "$OUT/generate.$name.log" || { tail -n 40 "$OUT/generate.$name.log"; exit 1; }
done

echo "== 5. ROUGE-1/2/SU4 (official ROUGE-1.5.5) on the $TEST_CLUSTERS test clusters"
HYPOTHESES=()
for name in "${SYSTEMS[@]}"; do HYPOTHESES+=("$name=$OUT/generate.$name.out"); done
mdsfair-compare --ref "$OUT/data-bin/test.summary.txt" --json "$OUT/rouge.json" "${HYPOTHESES[@]}"

echo "== training: updates, wall time (it depends on the machine's load; the scores do not)"
printf "%-16s %8s %8s %12s %s\n" system updates seconds "valid loss" "load average before / after"
for name in "${SYSTEMS[@]}"; do
    log="$OUT/train.$name.log"
    updates=$(grep -o "num_updates [0-9]*" "$log" | tail -n 1 | cut -d ' ' -f 2)
    seconds=$(grep -o "done training in [0-9.]*" "$log" | cut -d ' ' -f 4)
    valid=$(grep "valid on 'valid'" "$log" | tail -n 1 | grep -o "| loss [0-9.]*" | cut -d ' ' -f 3)
    before=$(grep -o "load average before: [0-9. ]*" "$OUT/table.$name.load" 2>/dev/null | cut -d ' ' -f 4-6)
    after=$(grep -o "load average after: [0-9. ]*" "$log" | cut -d ' ' -f 4-6)
    printf "%-16s %8s %8s %12s %s / %s\n" "$name" "$updates" "$seconds" "$valid" "$before" "$after"
done
