#!/usr/bin/env bash
# The hiertransformer results table at the quickstart's scale: 4,000 synthetic
# training clusters, every system trained for the same number of updates on the
# same data-bin (same source tokens: nothing is cut at 512), beam 4, official
# ROUGE-1.5.5 on the 100 test clusters.
#
#   bash examples/hiertransformer/run_synthetic_table.sh [OUT_DIR]   (default ./ht_table)
#   TRAIN_UPDATES=300   training budget per system in updates (fairseq --max-update):
#                       the same on every machine, so the table does not depend on its
#                       load; the wall time each system took is printed
#   TRAIN_CLUSTERS=4000 TEST_CLUSTERS=100   sizes of the synthetic splits
set -euo pipefail
OUT="${1:-ht_table}"
TRAIN_UPDATES="${TRAIN_UPDATES:-300}"
TRAIN_CLUSTERS="${TRAIN_CLUSTERS:-4000}"
TEST_CLUSTERS="${TEST_CLUSTERS:-100}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
mkdir -p "$OUT"

mdsfair-synth --out-dir "$OUT/raw" --seed 1 --train "$TRAIN_CLUSTERS" --valid 100 --test "$TEST_CLUSTERS"
mdsfair-preprocess --input-dir "$OUT/raw" --destdir "$OUT/data-bin" --overwrite --vocab-size 4000 --spm-model-type bpe \
    --side-data graph_similarity graph_discourse --workers 2 --no-progress-bar

HT=(--arch hiertransformer --local-layers 1 --global-layers 1 --decoder-layers 2
    --encoder-embed-dim 128 --encoder-ffn-embed-dim 512 --encoder-attention-heads 4)
declare -A SYSTEMS=(
  [hiertransformer]="${HT[*]}"
  [hiertransformer+similarity]="${HT[*]} --graph similarity --graph-heads 1"
  [hiertransformer+discourse]="${HT[*]} --graph discourse --graph-heads 1"
  [transformer]="--arch transformer --encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 128
                 --decoder-embed-dim 128 --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512
                 --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings"
)
COMPARE=()
for name in hiertransformer hiertransformer+similarity hiertransformer+discourse transformer; do
  echo "== $name ($TRAIN_UPDATES updates)"
  start=$(date +%s)
  # shellcheck disable=SC2086
  mdsfair-train "$OUT/data-bin" --task multidoc_summarization ${SYSTEMS[$name]} \
      --max-source-positions 512 --max-target-positions 128 --dropout 0.1 \
      --optimizer adam --adam-betas '(0.9, 0.98)' --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 200 \
      --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
      --max-tokens 8000 --max-update "$TRAIN_UPDATES" \
      --save-dir "$OUT/$name" --no-epoch-checkpoints --log-format simple --num-workers 0 --seed 1 --cpu \
      > "$OUT/$name.train.log" 2>&1
  grep -E "^INFO:train:|done training" "$OUT/$name.train.log" | tail -n 2
  echo "trained $TRAIN_UPDATES updates in $(( $(date +%s) - start )) s wall (load average now: $(cut -d ' ' -f 1-3 /proc/loadavg))"
  mdsfair-generate "$OUT/data-bin" --task multidoc_summarization --path "$OUT/$name/checkpoint_last.pt" \
      --gen-subset test --max-source-positions 512 --max-target-positions 128 \
      --beam 4 --max-len-b 80 --batch-size 50 --post-process sentencepiece --cpu \
      > "$OUT/$name.generate.out" 2> "$OUT/$name.generate.log"
  COMPARE+=("$name=$OUT/$name.generate.out")
done
mdsfair-baseline --method lead --lead-sentences 3 "$OUT/raw/test.jsonl" -o "$OUT/lead.txt"
mdsfair-baseline --method lexrank --num-sentences 3 "$OUT/raw/test.jsonl" -o "$OUT/lexrank.txt"
mdsfair-compare --ref "$OUT/data-bin/test.summary.txt" --json "$OUT/rouge.json" \
    "${COMPARE[@]}" lead="$OUT/lead.txt" lexrank="$OUT/lexrank.txt"
