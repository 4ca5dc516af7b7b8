#!/usr/bin/env bash
# mdsfair quickstart: synthesize -> preprocess -> fairseq-train -> fairseq-generate
# -> ROUGE of the model against the Lead and LexRank baselines.
#
#   bash examples/quickstart.sh [OUT_DIR]        (default: ./quickstart_out)
#
# Runs in under 10 minutes on a 2-core CPU. Environment overrides:
#   ARCH=...            hiertransformer (default; Liu & Lapata 2019) or transformer (flat)
#   TRAIN_UPDATES=220   training budget in updates (fairseq --max-update): the same
#                       number on every machine, so the table does not depend on its
#                       load; the wall time it took is printed
#   TRAIN_CLUSTERS=4000 size of the synthetic training split
#   TEST_CLUSTERS=100   size of the synthetic test split
set -euo pipefail
OUT="${1:-quickstart_out}"
ARCH="${ARCH:-hiertransformer}"
TRAIN_UPDATES="${TRAIN_UPDATES:-220}"
TRAIN_CLUSTERS="${TRAIN_CLUSTERS:-4000}"
TEST_CLUSTERS="${TEST_CLUSTERS:-100}"
mkdir -p "$OUT"
# One intra-op thread: for models this small, extra threads cost more than they
# save, and they thrash badly on a loaded machine (set OMP_NUM_THREADS to override).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

echo "== 1. synthesize a multi-document data set (facts spread over documents, redundancy, distractors)"
mdsfair-synth --out-dir "$OUT/raw" --seed 1 --train "$TRAIN_CLUSTERS" --valid 100 --test "$TEST_CLUSTERS"

echo "== 2. preprocess: structure, SentencePiece, binarization"
mdsfair-preprocess --input-dir "$OUT/raw" --destdir "$OUT/data-bin" --overwrite --vocab-size 4000 \
    --spm-model-type bpe --workers 2 --no-progress-bar

echo "== 3. train ($ARCH, ${TRAIN_UPDATES} updates)"
case "$ARCH" in
  hiertransformer)
    # Same width and depth as the flat model below: 1 local + 1 global encoder layer.
    MODEL_ARGS=(--arch hiertransformer --local-layers 1 --global-layers 1 --decoder-layers 2
                --encoder-embed-dim 128 --encoder-ffn-embed-dim 512 --encoder-attention-heads 4) ;;
  transformer)
    MODEL_ARGS=(--arch transformer --encoder-layers 2 --decoder-layers 2
                --encoder-embed-dim 128 --decoder-embed-dim 128
                --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512
                --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings) ;;
  *)
    MODEL_ARGS=(--arch "$ARCH") ;;
esac
TRAIN_START=$(date +%s)
mdsfair-train "$OUT/data-bin" --task multidoc_summarization "${MODEL_ARGS[@]}" \
    --max-source-positions 512 --max-target-positions 128 --dropout 0.1 \
    --optimizer adam --adam-betas '(0.9, 0.98)' --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 200 \
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
    --max-tokens 8000 --max-update "$TRAIN_UPDATES" \
    --save-dir "$OUT/checkpoints" --no-epoch-checkpoints --log-format simple --log-interval 50 \
    --num-workers 0 --seed 1 --cpu > "$OUT/train.log" 2>&1 || { tail -n 40 "$OUT/train.log"; exit 1; }
# the log's lines read "DATE TIME | INFO | LOGGER | message": show the truncation counts, the
# train and valid losses and the training time, without the date and level
grep -E "source tokens kept|\| INFO \| (train|valid) \||done training" "$OUT/train.log" \
    | sed -E 's/^[0-9-]+ [0-9:,]+ \| INFO \| //'
test -f "$OUT/checkpoints/checkpoint_last.pt"
echo "trained $TRAIN_UPDATES updates in $(( $(date +%s) - TRAIN_START )) s wall"

echo "== 4. generate the test summaries"
mdsfair-generate "$OUT/data-bin" --task multidoc_summarization --path "$OUT/checkpoints/checkpoint_last.pt" \
    --gen-subset test --max-source-positions 512 --max-target-positions 128 \
    --beam 4 --max-len-b 80 --batch-size 50 --post-process sentencepiece --cpu \
    > "$OUT/generate.out" 2> "$OUT/generate.log" || { tail -n 40 "$OUT/generate.log"; exit 1; }
grep -m 3 "^D-" "$OUT/generate.out" | cut -f 1,3

echo "== 5. baselines"
mdsfair-baseline --method lead --lead-sentences 3 "$OUT/raw/test.jsonl" -o "$OUT/lead.txt"
mdsfair-baseline --method lexrank --num-sentences 3 "$OUT/raw/test.jsonl" -o "$OUT/lexrank.txt"

echo "== 6. ROUGE (official ROUGE-1.5.5) on the test split"
mdsfair-compare --ref "$OUT/data-bin/test.summary.txt" --json "$OUT/rouge.json" \
    "$ARCH=$OUT/generate.out" lead=$OUT/lead.txt lexrank=$OUT/lexrank.txt
