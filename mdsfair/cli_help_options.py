"""The options that ``mdsfair-train -h`` and ``mdsfair-generate -h`` print (:mod:`mdsfair.cli_help`),
read from fairseq's parsers with mdsfair registered, so that the help needs neither torch nor fairseq.

Written by ``python -m mdsfair.cli_help --write``; ``tests/test_cli_help.py`` checks it against the parsers.
"""

#: the fairseq whose parsers the tables were read from
FAIRSEQ_VERSION = "0.12.3"

#: kind (task, model, criterion) -> mdsfair's name -> (the fairseq class it extends, by its registered name, or None; its options, (invocation, help), that the fairseq class lacks or describes otherwise)
MDSFAIR = {
    "task": {
        "content_selection": (
            None,
            (
                (
                    "--allow-arch-change",
                    "resume (--restore-file, or checkpoint_last.pt in --save-dir) although the model's architecture flags differ from the checkpoint's (e.g. --decoder-attention-heads, --activation-fn: same tensor shapes, another model); by default such a resume stops naming each flag with its old and new value. Dropouts and other non-architecture values may always change (mdsfair/checkpoints/architecture_change.py)",
                ),
                ("data", "directory of raw JSONL splits ({split}.jsonl) with summaries"),
                (
                    "--selector-dict SELECTOR_DICT",
                    "word dictionary of the selector (default: {data}/dict.selector.txt, built from the train split when missing)",
                ),
                (
                    "--selector-vocab-size SELECTOR_VOCAB_SIZE",
                    "words kept when building the dictionary (most frequent first) (default: 50000)",
                ),
                (
                    "--max-sentences MAX_SENTENCES",
                    "read at most this many sentences of a cluster, the first ones (the authors' num_utterances) (default: 1000)",
                ),
                (
                    "--max-sentence-words MAX_SENTENCE_WORDS",
                    "cut every sentence to this many words (the authors' num_words) (default: 50)",
                ),
                (
                    "--max-summary-words MAX_SUMMARY_WORDS",
                    "cut the summary to this many words before </s> (the authors' summary_length of 144 tokens with the start token) (default: 143)",
                ),
            ),
        ),
        "multidoc_summarization": (
            None,
            (
                (
                    "--allow-arch-change",
                    "resume (--restore-file, or checkpoint_last.pt in --save-dir) although the model's architecture flags differ from the checkpoint's (e.g. --decoder-attention-heads, --activation-fn: same tensor shapes, another model); by default such a resume stops naming each flag with its old and new value. Dropouts and other non-architecture values may always change (mdsfair/checkpoints/architecture_change.py)",
                ),
                (
                    "data",
                    "data-bin directory written by mdsfair-preprocess (several joined by ':' are visited round-robin per epoch)",
                ),
                (
                    "--max-source-positions MAX_SOURCE_POSITIONS",
                    "total source budget in tokens, special tokens included; longer sources are cut and counted (default: 1024)",
                ),
                (
                    "--max-target-positions MAX_TARGET_POSITIONS",
                    "maximum target length in tokens (longer targets are cut and counted) (default: 1024)",
                ),
                ("--max-documents MAX_DOCUMENTS", "keep at most this many documents per cluster (counted)"),
                (
                    "--max-paragraphs MAX_PARAGRAPHS",
                    "keep the first L' paragraphs in stream (ranked) order, as the Hierarchical Transformer does (counted)",
                ),
                ("--max-paragraph-tokens MAX_PARAGRAPH_TOKENS", "cut every paragraph to this many tokens (counted)"),
                (
                    "--per-document-budget",
                    "every document keeps its first (M - n) // n tokens (M = --max-source-positions, n = documents), HierEncDec's per-passage limit as the authors' code computes it; the source is then cut at M as without this flag (on by default when the data-bin records PRIMERA's layout)",
                ),
                (
                    "--no-document-start-token",
                    "do not start every document with <s> (the start-of-document token); by default each document starts with <s> and one </s> closes the source",
                ),
                (
                    "--source-layout {documents,primera}",
                    "how documents are joined: 'documents' starts each with <s> (see --no-document-start-token); 'primera' is PRIMERA's <s> doc_1 <doc-sep> ... doc_n <doc-sep> </s> (allenai/PRIMER script/dataloader.py), the <doc-sep> id taken from the data-bin's dictionary; with --per-document-budget every document then keeps its first M // n - 2 tokens, as the authors' code does (counted). Default: the layout the data-bin records (mdsfair-preprocess --source-layout; a recorded 'primera' also brings its per-document truncation), else 'documents'; a value that contradicts the recorded one is refused",
                ),
                (
                    "--no-truncate-target",
                    "do not cut long targets; fairseq then filters them by --max-target-positions",
                ),
                (
                    "--allow-dictionary-mismatch",
                    "load a checkpoint trained on a data-bin whose dictionary or subword model differs from this one's (deliberate vocabulary transfer); by default such a load stops with both data-bins named",
                ),
                (
                    "--no-checkpoint-checksum",
                    "do not store a SHA-256 checksum of the model weights in saved checkpoints (saves one pass over the weights per save; see mdsfair/checkpoints/checksums.py)",
                ),
                (
                    "--static-decoding",
                    "insist on the static-shape beam search (mdsfair.generation.static_decoding: a fixed batch x beam shape, the encoder output expanded once; the default generator wherever it gives fairseq's beams): refuse --constraints and --print-alignment instead of handing them to fairseq's generator",
                ),
                (
                    "--fairseq-generator",
                    "generate with fairseq's SequenceGenerator instead of the static-shape beam search (the default, same best beams; mdsfair.generation.static_decoding)",
                ),
                (
                    "--static-decoding-buckets STATIC_DECODING_BUCKETS",
                    "for the static-shape generator: comma-separated batch sizes; every batch is padded to the smallest that holds it (its last source repeated, the copies' output dropped), so that batches share a few shapes; empty (default): each batch keeps its own size",
                ),
                (
                    "--length-penalty-form {fairseq,gnmt}",
                    "the length penalty lp(len) a finished hypothesis's log-probability is divided by, with --lenpen as its alpha (len: its tokens with </s>): 'fairseq' len^alpha, fairseq's; 'gnmt' ((5 + len) / 6)^alpha, GNMT's (Wu et al. 2016), which the Hierarchical Transformer decodes with (alpha 0.4); either generator (mdsfair.generation.length_penalty) (default: fairseq)",
                ),
                (
                    "--min-len-words MIN_LEN_WORDS",
                    "generation: no summary ends before it holds this many words (a word begins at every word-initial subword of the data-bin's subword model), as DAPE's 200 (Multi-News) / 110 (Multi-XScience); --max-len-b still bounds the tokens (mdsfair.generation.word_limits)",
                ),
                (
                    "--max-len-words MAX_LEN_WORDS",
                    "generation: no summary holds more than this many words (a word may be finished, no new one begun), as DAPE's 300; --max-len-b still bounds the tokens (mdsfair.generation.word_limits)",
                ),
                (
                    "--eval-rouge",
                    "in validation, generate every cluster's summary and log ROUGE-1/2/L/Lsum F1 x 100 (rouge_1, rouge_2, rouge_l, rouge_lsum; the mean over the clusters, every stored reference of the data-bin) and rouge_avg, the mean of rouge_1/2/l, so --best-checkpoint-metric rouge_avg --maximize-best-checkpoint-metric keeps the checkpoint PRIMERA's avgr keeps",
                ),
                (
                    "--eval-rouge-args EVAL_ROUGE_ARGS",
                    'generation settings of --eval-rouge as JSON (fairseq-generate\'s names: beam, max_len_a, max_len_b, min_len, lenpen, no_repeat_ngram_size; and length_penalty_form) (default: {"beam": 4, "max_len_a": 0, "max_len_b": 256, "min_len": 1, "lenpen": 1.0})',
                ),
                (
                    "--eval-rouge-convention EVAL_ROUGE_CONVENTION",
                    "the ROUGE of --eval-rouge: mdsfair-fast (rouge-score with mdsfair's sentence splitting and stemming) or a convention scored by rouge-score (mdsfair-rouge --list-conventions); ROUGE-1.5.5's conventions average over bootstrap resamples of the whole set and are refused here (default: mdsfair-fast)",
                ),
            ),
        ),
        "multidoc_summarization_sparse": (
            None,
            (
                (
                    "--allow-arch-change",
                    "resume (--restore-file, or checkpoint_last.pt in --save-dir) although the model's architecture flags differ from the checkpoint's (e.g. --decoder-attention-heads, --activation-fn: same tensor shapes, another model); by default such a resume stops naming each flag with its old and new value. Dropouts and other non-architecture values may always change (mdsfair/checkpoints/architecture_change.py)",
                ),
                (
                    "data",
                    "data-bin directory written by mdsfair-preprocess (several joined by ':' are visited round-robin per epoch)",
                ),
                (
                    "--max-source-positions MAX_SOURCE_POSITIONS",
                    "total source budget in tokens, special tokens included; longer sources are cut and counted (default: 1024)",
                ),
                (
                    "--max-target-positions MAX_TARGET_POSITIONS",
                    "maximum target length in tokens (longer targets are cut and counted) (default: 1024)",
                ),
                ("--max-documents MAX_DOCUMENTS", "keep at most this many documents per cluster (counted)"),
                (
                    "--max-paragraphs MAX_PARAGRAPHS",
                    "keep the first L' paragraphs in stream (ranked) order, as the Hierarchical Transformer does (counted)",
                ),
                ("--max-paragraph-tokens MAX_PARAGRAPH_TOKENS", "cut every paragraph to this many tokens (counted)"),
                (
                    "--per-document-budget",
                    "every document keeps its first (M - n) // n tokens (M = --max-source-positions, n = documents), HierEncDec's per-passage limit as the authors' code computes it; the source is then cut at M as without this flag (on by default when the data-bin records PRIMERA's layout)",
                ),
                (
                    "--no-document-start-token",
                    "do not start every document with <s> (the start-of-document token); by default each document starts with <s> and one </s> closes the source",
                ),
                (
                    "--source-layout {documents,primera}",
                    "how documents are joined: 'documents' starts each with <s> (see --no-document-start-token); 'primera' is PRIMERA's <s> doc_1 <doc-sep> ... doc_n <doc-sep> </s> (allenai/PRIMER script/dataloader.py), the <doc-sep> id taken from the data-bin's dictionary; with --per-document-budget every document then keeps its first M // n - 2 tokens, as the authors' code does (counted). Default: the layout the data-bin records (mdsfair-preprocess --source-layout; a recorded 'primera' also brings its per-document truncation), else 'documents'; a value that contradicts the recorded one is refused",
                ),
                (
                    "--no-truncate-target",
                    "do not cut long targets; fairseq then filters them by --max-target-positions",
                ),
                (
                    "--allow-dictionary-mismatch",
                    "load a checkpoint trained on a data-bin whose dictionary or subword model differs from this one's (deliberate vocabulary transfer); by default such a load stops with both data-bins named",
                ),
                (
                    "--no-checkpoint-checksum",
                    "do not store a SHA-256 checksum of the model weights in saved checkpoints (saves one pass over the weights per save; see mdsfair/checkpoints/checksums.py)",
                ),
                (
                    "--static-decoding",
                    "insist on the static-shape beam search (mdsfair.generation.static_decoding: a fixed batch x beam shape, the encoder output expanded once; the default generator wherever it gives fairseq's beams): refuse --constraints and --print-alignment instead of handing them to fairseq's generator",
                ),
                (
                    "--fairseq-generator",
                    "generate with fairseq's SequenceGenerator instead of the static-shape beam search (the default, same best beams; mdsfair.generation.static_decoding)",
                ),
                (
                    "--static-decoding-buckets STATIC_DECODING_BUCKETS",
                    "for the static-shape generator: comma-separated batch sizes; every batch is padded to the smallest that holds it (its last source repeated, the copies' output dropped), so that batches share a few shapes; empty (default): each batch keeps its own size",
                ),
                (
                    "--length-penalty-form {fairseq,gnmt}",
                    "the length penalty lp(len) a finished hypothesis's log-probability is divided by, with --lenpen as its alpha (len: its tokens with </s>): 'fairseq' len^alpha, fairseq's; 'gnmt' ((5 + len) / 6)^alpha, GNMT's (Wu et al. 2016), which the Hierarchical Transformer decodes with (alpha 0.4); either generator (mdsfair.generation.length_penalty) (default: fairseq)",
                ),
                (
                    "--min-len-words MIN_LEN_WORDS",
                    "generation: no summary ends before it holds this many words (a word begins at every word-initial subword of the data-bin's subword model), as DAPE's 200 (Multi-News) / 110 (Multi-XScience); --max-len-b still bounds the tokens (mdsfair.generation.word_limits)",
                ),
                (
                    "--max-len-words MAX_LEN_WORDS",
                    "generation: no summary holds more than this many words (a word may be finished, no new one begun), as DAPE's 300; --max-len-b still bounds the tokens (mdsfair.generation.word_limits)",
                ),
                (
                    "--eval-rouge",
                    "in validation, generate every cluster's summary and log ROUGE-1/2/L/Lsum F1 x 100 (rouge_1, rouge_2, rouge_l, rouge_lsum; the mean over the clusters, every stored reference of the data-bin) and rouge_avg, the mean of rouge_1/2/l, so --best-checkpoint-metric rouge_avg --maximize-best-checkpoint-metric keeps the checkpoint PRIMERA's avgr keeps",
                ),
                (
                    "--eval-rouge-args EVAL_ROUGE_ARGS",
                    'generation settings of --eval-rouge as JSON (fairseq-generate\'s names: beam, max_len_a, max_len_b, min_len, lenpen, no_repeat_ngram_size; and length_penalty_form) (default: {"beam": 4, "max_len_a": 0, "max_len_b": 256, "min_len": 1, "lenpen": 1.0})',
                ),
                (
                    "--eval-rouge-convention EVAL_ROUGE_CONVENTION",
                    "the ROUGE of --eval-rouge: mdsfair-fast (rouge-score with mdsfair's sentence splitting and stemming) or a convention scored by rouge-score (mdsfair-rouge --list-conventions); ROUGE-1.5.5's conventions average over bootstrap resamples of the whole set and are refused here (default: mdsfair-fast)",
                ),
                (
                    "--sparse-training-stage {kl-only,interleaved,joint}",
                    "kl-only: train only the approximator on L_KL with BART frozen; interleaved: alternate decoder updates (L_xent + lambda*L_KL) and approximator updates (lambda*L_KL), Eq. 13-14; joint: the authors' single update of both on L_xent + lambda*L_KL (default: interleaved)",
                ),
                (
                    "--train-encoder",
                    "also train the encoder and the shared embeddings with the decoder (the paper trains only the decoder and the approximator)",
                ),
            ),
        ),
        "paragraph_ranking": (
            None,
            (
                (
                    "--allow-arch-change",
                    "resume (--restore-file, or checkpoint_last.pt in --save-dir) although the model's architecture flags differ from the checkpoint's (e.g. --decoder-attention-heads, --activation-fn: same tensor shapes, another model); by default such a resume stops naming each flag with its old and new value. Dropouts and other non-architecture values may always change (mdsfair/checkpoints/architecture_change.py)",
                ),
                ("data", "directory of raw JSONL splits ({split}.jsonl) with titles and summaries"),
                (
                    "--ranker-dict RANKER_DICT",
                    "word dictionary of the ranker (default: {data}/dict.ranker.txt, built from the train split when missing)",
                ),
                (
                    "--ranker-vocab-size RANKER_VOCAB_SIZE",
                    "words kept when building the dictionary (most frequent first) (default: 50000)",
                ),
                ("--max-title-tokens MAX_TITLE_TOKENS", "cut titles to this many words (default: 32)"),
                (
                    "--max-paragraph-tokens MAX_PARAGRAPH_TOKENS",
                    "cut paragraphs to this many words (WikiSum paragraphs average 70) (default: 100)",
                ),
                (
                    "--max-cluster-paragraphs MAX_CLUSTER_PARAGRAPHS",
                    "train on at most this many paragraphs per cluster (the first ones in stream order)",
                ),
            ),
        ),
    },
    "model": {
        "copy_transformer": (
            "transformer_pointer_generator",
            (
                ("--dropout DROPOUT", "dropout probability (default: 0.2)"),
                ("--attention-dropout ATTENTION_DROPOUT", "dropout probability for attention weights (default: 0.2)"),
                (
                    "--activation-dropout ACTIVATION_DROPOUT",
                    "dropout probability after activation in FFN. (default: 0.2)",
                ),
                ("--encoder-embed-dim ENCODER_EMBED_DIM", "encoder: embedding dimension (default: 512)"),
                (
                    "--encoder-ffn-embed-dim ENCODER_FFN_EMBED_DIM",
                    "encoder: embedding dimension for FFN (default: 2048)",
                ),
                ("--encoder-layers ENCODER_LAYERS", "encoder: number of layers (default: 4)"),
                (
                    "--encoder-attention-heads ENCODER_ATTENTION_HEADS",
                    "encoder: number of attention heads (default: 8)",
                ),
                ("--encoder-normalize-before", "encoder: apply layernorm before each block (default: on)"),
                ("--decoder-embed-dim DECODER_EMBED_DIM", "decoder: embedding dimension (default: 512)"),
                (
                    "--decoder-ffn-embed-dim DECODER_FFN_EMBED_DIM",
                    "decoder: embedding dimension for FFN (default: 2048)",
                ),
                ("--decoder-layers DECODER_LAYERS", "decoder: number of layers (default: 4)"),
                (
                    "--decoder-attention-heads DECODER_ATTENTION_HEADS",
                    "decoder: number of attention heads (default: 8)",
                ),
                ("--decoder-normalize-before", "decoder: apply layernorm before each block (default: on)"),
                (
                    "--share-all-embeddings",
                    "share encoder, decoder and output embeddings (requires shared dictionary and embed dim) (default: on)",
                ),
                ("--alignment-heads N", "number of attention heads to be used for pointing (default: 1)"),
                (
                    "--alignment-layer I",
                    "layer number to be used for pointing (0 corresponding to the bottommost layer) (default: -1)",
                ),
                (
                    "--source-position-markers N",
                    "dictionary includes N additional items that represent an OOV token at a particular input position (default: 0)",
                ),
            ),
        ),
        "dape_transformer": (
            "transformer",
            (
                ("--encoder-layers ENCODER_LAYERS", "encoder: number of layers (default: 8)"),
                ("--decoder-layers DECODER_LAYERS", "decoder: number of layers (default: 8)"),
                (
                    "--share-all-embeddings",
                    "share encoder, decoder and output embeddings (requires shared dictionary and embed dim) (default: on)",
                ),
                (
                    "--no-doc-positions",
                    "ablation 'w/o doc-pos en' (Table III): fairseq's token positions over the concatenated source, no document encoding (default: off)",
                ),
                (
                    "--no-dependency-encoding",
                    "ablation 'w/o depen en' (Table III): plain encoder self-attention, no dependency arcs needed (default: off)",
                ),
                (
                    "--doc-position-fn {sin,cos,sin-cos,scaled-sin-cos,linear,same,random}",
                    "document positional encoding function f_doc (Eq. 1; Tables IV, V): sin (the paper's), cos, sin-cos = iter(sin, cos) over dimensions, scaled-sin-cos = iter(sin(0.1k), cos(0.1k)), linear = slope*k, same = one value for all documents, random = fixed random value per document (default: sin)",
                ),
                (
                    "--doc-position-alpha DOC_POSITION_ALPHA",
                    "alpha of Eq. 2, the weight of the document encoding (the paper's) (default: 0.1)",
                ),
                (
                    "--doc-position-linear-slope DOC_POSITION_LINEAR_SLOPE",
                    "slope of --doc-position-fn linear (Table V: 1, 2, 5, 10) (default: 1.0)",
                ),
                (
                    "--doc-position-offset DOC_POSITION_OFFSET",
                    "k = 0-based document index + offset (0: the reading under which the paper's sin/cos comparison of Table IV holds; 1: k = 1..q as in its notation) (default: 0)",
                ),
                (
                    "--doc-token-positions {per-document,stream}",
                    "token position i of Eq. 1: per-document (restarts at every document, t_i^k) or stream (positions over the concatenated source) (default: per-document)",
                ),
                (
                    "--dependency-encoder {mlp,linear,arithmetic,arithmetic-core,arithmetic-root}",
                    "relation encoding (Table VI): mlp = F_depEnc, Linear-LeakyReLU-Linear (the paper's, Eq. 7); linear = one linear layer; arithmetic[-core|-root] = fixed weights 1, (N-1)/N, ..., 1/N by relation frequency [core dependents first | ROOT first] (default: mlp)",
                ),
                (
                    "--dependency-encoder-hidden-dim DEPENDENCY_ENCODER_HIDDEN_DIM",
                    "hidden size of F_depEnc (not given in the paper) (default: 64)",
                ),
                (
                    "--dependency-leaky-relu-slope DEPENDENCY_LEAKY_RELU_SLOPE",
                    "negative slope of F_depEnc's LeakyReLU (PyTorch's; not given in the paper) (default: 0.01)",
                ),
                (
                    "--dependency-arc-direction {both,dependent-to-head,head-to-dependent}",
                    "which cells an arc fills: both (M_ij = M_ji), dependent-to-head (row = dependent) or head-to-dependent (default: both)",
                ),
                (
                    "--dependency-no-arc-encoding",
                    "give token pairs without an arc F_depEnc(0) (literal Eq. 5-6) instead of 0 (default: off)",
                ),
                (
                    "--dependency-mask-on {weights,values}",
                    "weights: A~ = M*A + A on the attention weights (Eq. 9, the paper's); values: out = A V + M V (Table VI 'added on values') (default: weights)",
                ),
                (
                    "--dependency-layers DEPENDENCY_LAYERS",
                    "encoder layers (0-based, comma-separated) whose self-attention uses the dependency mask, or 'all' (default: all)",
                ),
            ),
        ),
        "hat_bart": (
            "bart",
            (
                (
                    "--encoder-self-attention {full,document,longformer,dependency,lsh,sinkhorn}",
                    "encoder self attention component (mdsfair/modules/components.py) (default: full)",
                ),
                (
                    "--encoder-positions {learned,sinusoidal,pegasus-sinusoidal,document-restart,document-aware}",
                    "encoder positions component (mdsfair/modules/components.py) (default: learned)",
                ),
                (
                    "--cross-attention {full,document-scaled,sparse,hat,hepos}",
                    "cross attention component (mdsfair/modules/components.py) (default: hat)",
                ),
                (
                    "--document-attention {blocked,dense}",
                    "implementation of the document encoder attention: 'blocked' computes attention per document block (memory grows with the longest document, Sec. 7), 'dense' masks a full T x T matrix as the authors did (same numbers) (default: blocked)",
                ),
                (
                    "--attention-window ATTENTION_WINDOW",
                    "Longformer window per encoder layer: one even number for all layers or a comma list with one per layer; window w lets each token see w/2 tokens on each side (Hugging Face's attention_window; 512 under the primera architecture, as the released checkpoints) (default: 1024)",
                ),
                (
                    "--global-attention {first,doc-sep,documents,none}",
                    "tokens with global attention: 'first' = the first source token (LED), 'doc-sep' = the first token and every <doc-sep> (PRIMERA; the primera architecture's), 'documents' = the first token of every document (from the data-bin's document ids), 'none' = no global token, the sliding window alone (LoBART; the attention has no global projections) (default: first)",
                ),
                (
                    "--longformer-attention {fused,banded}",
                    "computation of the encoder attention (same numbers): 'fused' = every window through torch's scaled_dot_product_attention with a shared band mask (fused kernels), 'banded' = explicit banded score tensors (the portable reference, as Hugging Face computes them) (default: fused)",
                ),
                (
                    "--dependency-encoder {mlp,linear,arithmetic,arithmetic-core,arithmetic-root}",
                    "relation encoding (Table VI): mlp = F_depEnc, Linear-LeakyReLU-Linear (the paper's, Eq. 7); linear = one linear layer; arithmetic[-core|-root] = fixed weights 1, (N-1)/N, ..., 1/N by relation frequency [core dependents first | ROOT first] (default: mlp)",
                ),
                (
                    "--dependency-encoder-hidden-dim DEPENDENCY_ENCODER_HIDDEN_DIM",
                    "hidden size of F_depEnc (not given in the paper) (default: 64)",
                ),
                (
                    "--dependency-leaky-relu-slope DEPENDENCY_LEAKY_RELU_SLOPE",
                    "negative slope of F_depEnc's LeakyReLU (PyTorch's; not given in the paper) (default: 0.01)",
                ),
                (
                    "--dependency-arc-direction {both,dependent-to-head,head-to-dependent}",
                    "which cells an arc fills: both (M_ij = M_ji), dependent-to-head (row = dependent) or head-to-dependent (default: both)",
                ),
                (
                    "--dependency-no-arc-encoding",
                    "give token pairs without an arc F_depEnc(0) (literal Eq. 5-6) instead of 0 (default: off)",
                ),
                (
                    "--dependency-mask-on {weights,values}",
                    "weights: A~ = M*A + A on the attention weights (Eq. 9, the paper's); values: out = A V + M V (Table VI 'added on values') (default: weights)",
                ),
                (
                    "--dependency-layers DEPENDENCY_LAYERS",
                    "encoder layers (0-based, comma-separated) whose self-attention uses the dependency mask, or 'all' (default: all)",
                ),
                (
                    "--efficient-attention-layers {hybrid,all}",
                    "lsh, sinkhorn: the encoder layers that take that attention: 'hybrid' = the second, fourth, ... layers, the others sliding-window attention (the authors' encoder unless --encoder_not_hybrid); 'all' = every encoder layer (default: hybrid)",
                ),
                (
                    "--hybrid-sliding-window N",
                    "lsh, sinkhorn under --efficient-attention-layers hybrid: the window of the sliding-window layers, even; each token sees window/2 tokens on each side (the authors' --window 128 on each side) (default: 256)",
                ),
                (
                    "--lsh-chunk-length N",
                    "LSH attention: slots per chunk of the sorted sequence; each chunk attends to itself and the chunk before (the authors' --bucket_size) (default: 64)",
                ),
                ("--lsh-hashes N", "LSH attention: hashing rounds, each with its own random rotation (default: 4)"),
                (
                    "--lsh-buckets N",
                    "LSH attention: buckets per hashing round (even); unset, the largest power of two not above 2 * (max source positions // chunk length), as the authors compute it",
                ),
                (
                    "--lsh-seed N",
                    "LSH attention: the seed of the random rotations of every forward in evaluation (default: 1)",
                ),
                (
                    "--sinkhorn-block-size N",
                    "Sinkhorn attention: tokens per block (the authors' --bucket_size) (default: 64)",
                ),
                (
                    "--sinkhorn-iterations N",
                    "Sinkhorn attention: row and column normalisations of the block sorting matrix (default: 7)",
                ),
                ("--sinkhorn-temperature T", "Sinkhorn attention: the Gumbel-Sinkhorn temperature (default: 0.7)"),
                (
                    "--sinkhorn-seed N",
                    "Sinkhorn attention: the seed of the Gumbel noise of every forward in evaluation (default: 1)",
                ),
                (
                    "--position-tiling {beltagy,authors,mirror}",
                    "how a shorter checkpoint position table is extended on load: 'beltagy' repeats the real positions (the paper, Sec. 5.3, after Longformer), 'authors' repeats the whole table including fairseq/HF's two offset rows as the authors' code does, 'mirror' alternates the whole table and its reverse as LoBART's code does (the lobart architectures' default) (default: beltagy)",
                ),
                (
                    "--doc-position-fn {sin,cos,sin-cos,scaled-sin-cos,linear,same,random}",
                    "document positional encoding function f_doc (Eq. 1; Tables IV, V): sin (the paper's), cos, sin-cos = iter(sin, cos) over dimensions, scaled-sin-cos = iter(sin(0.1k), cos(0.1k)), linear = slope*k, same = one value for all documents, random = fixed random value per document (default: sin)",
                ),
                (
                    "--doc-position-alpha DOC_POSITION_ALPHA",
                    "alpha of Eq. 2, the weight of the document encoding (the paper's) (default: 0.1)",
                ),
                (
                    "--doc-position-linear-slope DOC_POSITION_LINEAR_SLOPE",
                    "slope of --doc-position-fn linear (Table V: 1, 2, 5, 10) (default: 1.0)",
                ),
                (
                    "--doc-position-offset DOC_POSITION_OFFSET",
                    "k = 0-based document index + offset (0: the reading under which the paper's sin/cos comparison of Table IV holds; 1: k = 1..q as in its notation) (default: 0)",
                ),
                (
                    "--doc-token-positions {per-document,stream}",
                    "token position i of Eq. 1: per-document (restarts at every document, t_i^k) or stream (positions over the concatenated source) (default: per-document)",
                ),
                (
                    "--top-r R",
                    "sentences kept by every cross-attention query (Eq. 6; the paper's r on CNN/DailyMail); 0 keeps all (full attention) (default: 5)",
                ),
                (
                    "--sentence-selection {ideal,approx,random,mix}",
                    "saliency that ranks sentences: ideal (exact Eq. 4), approx (the approximator, Eq. 7, or the model-free Eq. 19), random, or mix (Sec. 4.3 scheduled sampling ideal->approx in training, one draw per forward pass shared by all layers; approx in evaluation and generation) (default: approx)",
                ),
                (
                    "--approximator {model-based,model-free}",
                    "model-based (BiGRU sentence encoder + W^Q/W^K, Eq. 8-10) or model-free (App. D Eq. 19, phi = ELU + 1, no parameters; the unnormalized scores, Z_m dropped, averaged over heads before top-r, as App. D and the authors' decoding) (default: model-based)",
                ),
                (
                    "--sentence-encoder {bigru,attention-pooling}",
                    "sentence encoder of the model-based approximator (f2 of Eq. 7): bigru, the bidirectional GRU of Eq. 10 (App. A.1), or attention-pooling, the cheaper hierarchical attention over each sentence's tokens that Sec. 4.5 proposes (multi-head pooling, no recurrence) (default: bigru)",
                ),
                (
                    "--sentence-encoder-layers N",
                    "layers of the bidirectional GRU sentence encoder (App. A.1) (default: 2)",
                ),
                (
                    "--sentence-encoder-hidden-dim D",
                    "hidden size per direction of the GRU (App. A.1: the model dimension, 1024 for BART-large) (default: --encoder-embed-dim)",
                ),
                (
                    "--share-selection-across-beams",
                    "average the sentence scores over the beam hypotheses of a source before top-r (the authors' decoding); off: every hypothesis selects its own sentences (default: off)",
                ),
                (
                    "--sparse-generation-path {auto,gather,mask}",
                    "how incremental generation reads the top-r sentences: gather their encoder states per hypothesis (cost ~ kept tokens * heads), mask the full per-source attention (cost ~ N, same output), or auto: gather at a step when the most tokens a hypothesis keeps * heads <= 2 * N (default: auto)",
                ),
                (
                    "--mix-decay-updates N",
                    "for --sentence-selection mix: use the exact saliency with probability max(0, 1 - update/N), else the approximation (Sec. 4.3: 1 - step/epoch_size, so N = the updates of one epoch)",
                ),
                (
                    "--hierarchical-sentence-layers N",
                    "Transformer encoder layers over the sentence-start states after the token encoder (HAT-BART, Rohde et al. 2021; 2 is this implementation's choice, see examples/hat_bart/README.md) (default: 2)",
                ),
                (
                    "--hepos-stride S",
                    "HEPOS stride s: head h of the cross-attention reads the source positions j with j mod s = h mod s, 1/s of the source (Huang et al. 2021, Sec. 3); s must divide the decoder's attention heads (default: 4)",
                ),
                (
                    "--max-encoder-positions MAX_ENCODER_POSITIONS",
                    "rows of the encoder's learned position table (16384 under the led architectures, 4096 under primera and hierencdec, as the released models); the task's --max-source-positions may not exceed it (default: 3072)",
                ),
            ),
        ),
        "hepos_bart": (
            "bart",
            (
                (
                    "--encoder-self-attention {full,document,longformer,dependency,lsh,sinkhorn}",
                    "encoder self attention component (mdsfair/modules/components.py) (default: full)",
                ),
                (
                    "--encoder-positions {learned,sinusoidal,pegasus-sinusoidal,document-restart,document-aware}",
                    "encoder positions component (mdsfair/modules/components.py) (default: learned)",
                ),
                (
                    "--cross-attention {full,document-scaled,sparse,hat,hepos}",
                    "cross attention component (mdsfair/modules/components.py) (default: hepos)",
                ),
                (
                    "--document-attention {blocked,dense}",
                    "implementation of the document encoder attention: 'blocked' computes attention per document block (memory grows with the longest document, Sec. 7), 'dense' masks a full T x T matrix as the authors did (same numbers) (default: blocked)",
                ),
                (
                    "--attention-window ATTENTION_WINDOW",
                    "Longformer window per encoder layer: one even number for all layers or a comma list with one per layer; window w lets each token see w/2 tokens on each side (Hugging Face's attention_window; 512 under the primera architecture, as the released checkpoints) (default: 1024)",
                ),
                (
                    "--global-attention {first,doc-sep,documents,none}",
                    "tokens with global attention: 'first' = the first source token (LED), 'doc-sep' = the first token and every <doc-sep> (PRIMERA; the primera architecture's), 'documents' = the first token of every document (from the data-bin's document ids), 'none' = no global token, the sliding window alone (LoBART; the attention has no global projections) (default: first)",
                ),
                (
                    "--longformer-attention {fused,banded}",
                    "computation of the encoder attention (same numbers): 'fused' = every window through torch's scaled_dot_product_attention with a shared band mask (fused kernels), 'banded' = explicit banded score tensors (the portable reference, as Hugging Face computes them) (default: fused)",
                ),
                (
                    "--dependency-encoder {mlp,linear,arithmetic,arithmetic-core,arithmetic-root}",
                    "relation encoding (Table VI): mlp = F_depEnc, Linear-LeakyReLU-Linear (the paper's, Eq. 7); linear = one linear layer; arithmetic[-core|-root] = fixed weights 1, (N-1)/N, ..., 1/N by relation frequency [core dependents first | ROOT first] (default: mlp)",
                ),
                (
                    "--dependency-encoder-hidden-dim DEPENDENCY_ENCODER_HIDDEN_DIM",
                    "hidden size of F_depEnc (not given in the paper) (default: 64)",
                ),
                (
                    "--dependency-leaky-relu-slope DEPENDENCY_LEAKY_RELU_SLOPE",
                    "negative slope of F_depEnc's LeakyReLU (PyTorch's; not given in the paper) (default: 0.01)",
                ),
                (
                    "--dependency-arc-direction {both,dependent-to-head,head-to-dependent}",
                    "which cells an arc fills: both (M_ij = M_ji), dependent-to-head (row = dependent) or head-to-dependent (default: both)",
                ),
                (
                    "--dependency-no-arc-encoding",
                    "give token pairs without an arc F_depEnc(0) (literal Eq. 5-6) instead of 0 (default: off)",
                ),
                (
                    "--dependency-mask-on {weights,values}",
                    "weights: A~ = M*A + A on the attention weights (Eq. 9, the paper's); values: out = A V + M V (Table VI 'added on values') (default: weights)",
                ),
                (
                    "--dependency-layers DEPENDENCY_LAYERS",
                    "encoder layers (0-based, comma-separated) whose self-attention uses the dependency mask, or 'all' (default: all)",
                ),
                (
                    "--efficient-attention-layers {hybrid,all}",
                    "lsh, sinkhorn: the encoder layers that take that attention: 'hybrid' = the second, fourth, ... layers, the others sliding-window attention (the authors' encoder unless --encoder_not_hybrid); 'all' = every encoder layer (default: hybrid)",
                ),
                (
                    "--hybrid-sliding-window N",
                    "lsh, sinkhorn under --efficient-attention-layers hybrid: the window of the sliding-window layers, even; each token sees window/2 tokens on each side (the authors' --window 128 on each side) (default: 256)",
                ),
                (
                    "--lsh-chunk-length N",
                    "LSH attention: slots per chunk of the sorted sequence; each chunk attends to itself and the chunk before (the authors' --bucket_size) (default: 64)",
                ),
                ("--lsh-hashes N", "LSH attention: hashing rounds, each with its own random rotation (default: 4)"),
                (
                    "--lsh-buckets N",
                    "LSH attention: buckets per hashing round (even); unset, the largest power of two not above 2 * (max source positions // chunk length), as the authors compute it",
                ),
                (
                    "--lsh-seed N",
                    "LSH attention: the seed of the random rotations of every forward in evaluation (default: 1)",
                ),
                (
                    "--sinkhorn-block-size N",
                    "Sinkhorn attention: tokens per block (the authors' --bucket_size) (default: 64)",
                ),
                (
                    "--sinkhorn-iterations N",
                    "Sinkhorn attention: row and column normalisations of the block sorting matrix (default: 7)",
                ),
                ("--sinkhorn-temperature T", "Sinkhorn attention: the Gumbel-Sinkhorn temperature (default: 0.7)"),
                (
                    "--sinkhorn-seed N",
                    "Sinkhorn attention: the seed of the Gumbel noise of every forward in evaluation (default: 1)",
                ),
                (
                    "--position-tiling {beltagy,authors,mirror}",
                    "how a shorter checkpoint position table is extended on load: 'beltagy' repeats the real positions (the paper, Sec. 5.3, after Longformer), 'authors' repeats the whole table including fairseq/HF's two offset rows as the authors' code does, 'mirror' alternates the whole table and its reverse as LoBART's code does (the lobart architectures' default) (default: beltagy)",
                ),
                (
                    "--doc-position-fn {sin,cos,sin-cos,scaled-sin-cos,linear,same,random}",
                    "document positional encoding function f_doc (Eq. 1; Tables IV, V): sin (the paper's), cos, sin-cos = iter(sin, cos) over dimensions, scaled-sin-cos = iter(sin(0.1k), cos(0.1k)), linear = slope*k, same = one value for all documents, random = fixed random value per document (default: sin)",
                ),
                (
                    "--doc-position-alpha DOC_POSITION_ALPHA",
                    "alpha of Eq. 2, the weight of the document encoding (the paper's) (default: 0.1)",
                ),
                (
                    "--doc-position-linear-slope DOC_POSITION_LINEAR_SLOPE",
                    "slope of --doc-position-fn linear (Table V: 1, 2, 5, 10) (default: 1.0)",
                ),
                (
                    "--doc-position-offset DOC_POSITION_OFFSET",
                    "k = 0-based document index + offset (0: the reading under which the paper's sin/cos comparison of Table IV holds; 1: k = 1..q as in its notation) (default: 0)",
                ),
                (
                    "--doc-token-positions {per-document,stream}",
                    "token position i of Eq. 1: per-document (restarts at every document, t_i^k) or stream (positions over the concatenated source) (default: per-document)",
                ),
                (
                    "--top-r R",
                    "sentences kept by every cross-attention query (Eq. 6; the paper's r on CNN/DailyMail); 0 keeps all (full attention) (default: 5)",
                ),
                (
                    "--sentence-selection {ideal,approx,random,mix}",
                    "saliency that ranks sentences: ideal (exact Eq. 4), approx (the approximator, Eq. 7, or the model-free Eq. 19), random, or mix (Sec. 4.3 scheduled sampling ideal->approx in training, one draw per forward pass shared by all layers; approx in evaluation and generation) (default: approx)",
                ),
                (
                    "--approximator {model-based,model-free}",
                    "model-based (BiGRU sentence encoder + W^Q/W^K, Eq. 8-10) or model-free (App. D Eq. 19, phi = ELU + 1, no parameters; the unnormalized scores, Z_m dropped, averaged over heads before top-r, as App. D and the authors' decoding) (default: model-based)",
                ),
                (
                    "--sentence-encoder {bigru,attention-pooling}",
                    "sentence encoder of the model-based approximator (f2 of Eq. 7): bigru, the bidirectional GRU of Eq. 10 (App. A.1), or attention-pooling, the cheaper hierarchical attention over each sentence's tokens that Sec. 4.5 proposes (multi-head pooling, no recurrence) (default: bigru)",
                ),
                (
                    "--sentence-encoder-layers N",
                    "layers of the bidirectional GRU sentence encoder (App. A.1) (default: 2)",
                ),
                (
                    "--sentence-encoder-hidden-dim D",
                    "hidden size per direction of the GRU (App. A.1: the model dimension, 1024 for BART-large) (default: --encoder-embed-dim)",
                ),
                (
                    "--share-selection-across-beams",
                    "average the sentence scores over the beam hypotheses of a source before top-r (the authors' decoding); off: every hypothesis selects its own sentences (default: off)",
                ),
                (
                    "--sparse-generation-path {auto,gather,mask}",
                    "how incremental generation reads the top-r sentences: gather their encoder states per hypothesis (cost ~ kept tokens * heads), mask the full per-source attention (cost ~ N, same output), or auto: gather at a step when the most tokens a hypothesis keeps * heads <= 2 * N (default: auto)",
                ),
                (
                    "--mix-decay-updates N",
                    "for --sentence-selection mix: use the exact saliency with probability max(0, 1 - update/N), else the approximation (Sec. 4.3: 1 - step/epoch_size, so N = the updates of one epoch)",
                ),
                (
                    "--hierarchical-sentence-layers N",
                    "Transformer encoder layers over the sentence-start states after the token encoder (HAT-BART, Rohde et al. 2021; 2 is this implementation's choice, see examples/hat_bart/README.md) (default: 2)",
                ),
                (
                    "--hepos-stride S",
                    "HEPOS stride s: head h of the cross-attention reads the source positions j with j mod s = h mod s, 1/s of the source (Huang et al. 2021, Sec. 3); s must divide the decoder's attention heads (default: 4)",
                ),
                (
                    "--max-encoder-positions MAX_ENCODER_POSITIONS",
                    "rows of the encoder's learned position table (16384 under the led architectures, 4096 under primera and hierencdec, as the released models); the task's --max-source-positions may not exceed it (default: 7168)",
                ),
            ),
        ),
        "hierencdec_bart": (
            "bart",
            (
                (
                    "--encoder-self-attention {full,document,longformer,dependency,lsh,sinkhorn}",
                    "encoder self attention component (mdsfair/modules/components.py) (default: document)",
                ),
                (
                    "--encoder-positions {learned,sinusoidal,pegasus-sinusoidal,document-restart,document-aware}",
                    "encoder positions component (mdsfair/modules/components.py) (default: document-restart)",
                ),
                (
                    "--cross-attention {full,document-scaled,sparse,hat,hepos}",
                    "cross attention component (mdsfair/modules/components.py) (default: document-scaled)",
                ),
                (
                    "--document-attention {blocked,dense}",
                    "implementation of the document encoder attention: 'blocked' computes attention per document block (memory grows with the longest document, Sec. 7), 'dense' masks a full T x T matrix as the authors did (same numbers) (default: blocked)",
                ),
                (
                    "--attention-window ATTENTION_WINDOW",
                    "Longformer window per encoder layer: one even number for all layers or a comma list with one per layer; window w lets each token see w/2 tokens on each side (Hugging Face's attention_window; 512 under the primera architecture, as the released checkpoints) (default: 1024)",
                ),
                (
                    "--global-attention {first,doc-sep,documents,none}",
                    "tokens with global attention: 'first' = the first source token (LED), 'doc-sep' = the first token and every <doc-sep> (PRIMERA; the primera architecture's), 'documents' = the first token of every document (from the data-bin's document ids), 'none' = no global token, the sliding window alone (LoBART; the attention has no global projections) (default: first)",
                ),
                (
                    "--longformer-attention {fused,banded}",
                    "computation of the encoder attention (same numbers): 'fused' = every window through torch's scaled_dot_product_attention with a shared band mask (fused kernels), 'banded' = explicit banded score tensors (the portable reference, as Hugging Face computes them) (default: fused)",
                ),
                (
                    "--dependency-encoder {mlp,linear,arithmetic,arithmetic-core,arithmetic-root}",
                    "relation encoding (Table VI): mlp = F_depEnc, Linear-LeakyReLU-Linear (the paper's, Eq. 7); linear = one linear layer; arithmetic[-core|-root] = fixed weights 1, (N-1)/N, ..., 1/N by relation frequency [core dependents first | ROOT first] (default: mlp)",
                ),
                (
                    "--dependency-encoder-hidden-dim DEPENDENCY_ENCODER_HIDDEN_DIM",
                    "hidden size of F_depEnc (not given in the paper) (default: 64)",
                ),
                (
                    "--dependency-leaky-relu-slope DEPENDENCY_LEAKY_RELU_SLOPE",
                    "negative slope of F_depEnc's LeakyReLU (PyTorch's; not given in the paper) (default: 0.01)",
                ),
                (
                    "--dependency-arc-direction {both,dependent-to-head,head-to-dependent}",
                    "which cells an arc fills: both (M_ij = M_ji), dependent-to-head (row = dependent) or head-to-dependent (default: both)",
                ),
                (
                    "--dependency-no-arc-encoding",
                    "give token pairs without an arc F_depEnc(0) (literal Eq. 5-6) instead of 0 (default: off)",
                ),
                (
                    "--dependency-mask-on {weights,values}",
                    "weights: A~ = M*A + A on the attention weights (Eq. 9, the paper's); values: out = A V + M V (Table VI 'added on values') (default: weights)",
                ),
                (
                    "--dependency-layers DEPENDENCY_LAYERS",
                    "encoder layers (0-based, comma-separated) whose self-attention uses the dependency mask, or 'all' (default: all)",
                ),
                (
                    "--efficient-attention-layers {hybrid,all}",
                    "lsh, sinkhorn: the encoder layers that take that attention: 'hybrid' = the second, fourth, ... layers, the others sliding-window attention (the authors' encoder unless --encoder_not_hybrid); 'all' = every encoder layer (default: hybrid)",
                ),
                (
                    "--hybrid-sliding-window N",
                    "lsh, sinkhorn under --efficient-attention-layers hybrid: the window of the sliding-window layers, even; each token sees window/2 tokens on each side (the authors' --window 128 on each side) (default: 256)",
                ),
                (
                    "--lsh-chunk-length N",
                    "LSH attention: slots per chunk of the sorted sequence; each chunk attends to itself and the chunk before (the authors' --bucket_size) (default: 64)",
                ),
                ("--lsh-hashes N", "LSH attention: hashing rounds, each with its own random rotation (default: 4)"),
                (
                    "--lsh-buckets N",
                    "LSH attention: buckets per hashing round (even); unset, the largest power of two not above 2 * (max source positions // chunk length), as the authors compute it",
                ),
                (
                    "--lsh-seed N",
                    "LSH attention: the seed of the random rotations of every forward in evaluation (default: 1)",
                ),
                (
                    "--sinkhorn-block-size N",
                    "Sinkhorn attention: tokens per block (the authors' --bucket_size) (default: 64)",
                ),
                (
                    "--sinkhorn-iterations N",
                    "Sinkhorn attention: row and column normalisations of the block sorting matrix (default: 7)",
                ),
                ("--sinkhorn-temperature T", "Sinkhorn attention: the Gumbel-Sinkhorn temperature (default: 0.7)"),
                (
                    "--sinkhorn-seed N",
                    "Sinkhorn attention: the seed of the Gumbel noise of every forward in evaluation (default: 1)",
                ),
                (
                    "--position-tiling {beltagy,authors,mirror}",
                    "how a shorter checkpoint position table is extended on load: 'beltagy' repeats the real positions (the paper, Sec. 5.3, after Longformer), 'authors' repeats the whole table including fairseq/HF's two offset rows as the authors' code does, 'mirror' alternates the whole table and its reverse as LoBART's code does (the lobart architectures' default) (default: beltagy)",
                ),
                (
                    "--doc-position-fn {sin,cos,sin-cos,scaled-sin-cos,linear,same,random}",
                    "document positional encoding function f_doc (Eq. 1; Tables IV, V): sin (the paper's), cos, sin-cos = iter(sin, cos) over dimensions, scaled-sin-cos = iter(sin(0.1k), cos(0.1k)), linear = slope*k, same = one value for all documents, random = fixed random value per document (default: sin)",
                ),
                (
                    "--doc-position-alpha DOC_POSITION_ALPHA",
                    "alpha of Eq. 2, the weight of the document encoding (the paper's) (default: 0.1)",
                ),
                (
                    "--doc-position-linear-slope DOC_POSITION_LINEAR_SLOPE",
                    "slope of --doc-position-fn linear (Table V: 1, 2, 5, 10) (default: 1.0)",
                ),
                (
                    "--doc-position-offset DOC_POSITION_OFFSET",
                    "k = 0-based document index + offset (0: the reading under which the paper's sin/cos comparison of Table IV holds; 1: k = 1..q as in its notation) (default: 0)",
                ),
                (
                    "--doc-token-positions {per-document,stream}",
                    "token position i of Eq. 1: per-document (restarts at every document, t_i^k) or stream (positions over the concatenated source) (default: per-document)",
                ),
                (
                    "--top-r R",
                    "sentences kept by every cross-attention query (Eq. 6; the paper's r on CNN/DailyMail); 0 keeps all (full attention) (default: 5)",
                ),
                (
                    "--sentence-selection {ideal,approx,random,mix}",
                    "saliency that ranks sentences: ideal (exact Eq. 4), approx (the approximator, Eq. 7, or the model-free Eq. 19), random, or mix (Sec. 4.3 scheduled sampling ideal->approx in training, one draw per forward pass shared by all layers; approx in evaluation and generation) (default: approx)",
                ),
                (
                    "--approximator {model-based,model-free}",
                    "model-based (BiGRU sentence encoder + W^Q/W^K, Eq. 8-10) or model-free (App. D Eq. 19, phi = ELU + 1, no parameters; the unnormalized scores, Z_m dropped, averaged over heads before top-r, as App. D and the authors' decoding) (default: model-based)",
                ),
                (
                    "--sentence-encoder {bigru,attention-pooling}",
                    "sentence encoder of the model-based approximator (f2 of Eq. 7): bigru, the bidirectional GRU of Eq. 10 (App. A.1), or attention-pooling, the cheaper hierarchical attention over each sentence's tokens that Sec. 4.5 proposes (multi-head pooling, no recurrence) (default: bigru)",
                ),
                (
                    "--sentence-encoder-layers N",
                    "layers of the bidirectional GRU sentence encoder (App. A.1) (default: 2)",
                ),
                (
                    "--sentence-encoder-hidden-dim D",
                    "hidden size per direction of the GRU (App. A.1: the model dimension, 1024 for BART-large) (default: --encoder-embed-dim)",
                ),
                (
                    "--share-selection-across-beams",
                    "average the sentence scores over the beam hypotheses of a source before top-r (the authors' decoding); off: every hypothesis selects its own sentences (default: off)",
                ),
                (
                    "--sparse-generation-path {auto,gather,mask}",
                    "how incremental generation reads the top-r sentences: gather their encoder states per hypothesis (cost ~ kept tokens * heads), mask the full per-source attention (cost ~ N, same output), or auto: gather at a step when the most tokens a hypothesis keeps * heads <= 2 * N (default: auto)",
                ),
                (
                    "--mix-decay-updates N",
                    "for --sentence-selection mix: use the exact saliency with probability max(0, 1 - update/N), else the approximation (Sec. 4.3: 1 - step/epoch_size, so N = the updates of one epoch)",
                ),
                (
                    "--hierarchical-sentence-layers N",
                    "Transformer encoder layers over the sentence-start states after the token encoder (HAT-BART, Rohde et al. 2021; 2 is this implementation's choice, see examples/hat_bart/README.md) (default: 2)",
                ),
                (
                    "--hepos-stride S",
                    "HEPOS stride s: head h of the cross-attention reads the source positions j with j mod s = h mod s, 1/s of the source (Huang et al. 2021, Sec. 3); s must divide the decoder's attention heads (default: 4)",
                ),
                (
                    "--max-encoder-positions MAX_ENCODER_POSITIONS",
                    "rows of the encoder's learned position table (16384 under the led architectures, 4096 under primera and hierencdec, as the released models); the task's --max-source-positions may not exceed it (default: the model's --max-source-positions)",
                ),
                (
                    "--no-hierarchical-encoder",
                    "full encoder self-attention over all documents instead of attention within each document plus the start-of-document exchange (Sec. 4.1; Table 3 'HierEnc' off; = --encoder-self-attention full)",
                ),
                (
                    "--no-hierarchical-decoder",
                    "stock cross-attention softmax instead of Eq. 3-5 (Sec. 4.2; Table 3 'HierDec' off; = --cross-attention full)",
                ),
                (
                    "--no-position-restart",
                    "one position sequence over the whole source instead of restarting at every document (Sec. 4.1.1; Table 3 'posres' off; = --encoder-positions learned)",
                ),
            ),
        ),
        "hiertransformer": (
            "transformer",
            (
                ("--dropout DROPOUT", "dropout probability (default: 0.1)"),
                ("--attention-dropout ATTENTION_DROPOUT", "dropout probability for attention weights (default: 0.0)"),
                (
                    "--activation-dropout ACTIVATION_DROPOUT",
                    "dropout probability after activation in FFN. (default: 0.0)",
                ),
                ("--encoder-embed-dim ENCODER_EMBED_DIM", "encoder: embedding dimension (default: 256)"),
                (
                    "--encoder-ffn-embed-dim ENCODER_FFN_EMBED_DIM",
                    "encoder: embedding dimension for FFN (default: 1024)",
                ),
                (
                    "--encoder-attention-heads ENCODER_ATTENTION_HEADS",
                    "encoder: number of attention heads (default: 8)",
                ),
                ("--encoder-normalize-before", "encoder: apply layernorm before each block (default: off)"),
                (
                    "--max-source-positions MAX_SOURCE_POSITIONS",
                    "Maximum input length supported by the encoder (default: 1024)",
                ),
                (
                    "--decoder-embed-dim DECODER_EMBED_DIM",
                    "decoder: embedding dimension (default: --encoder-embed-dim)",
                ),
                (
                    "--decoder-ffn-embed-dim DECODER_FFN_EMBED_DIM",
                    "decoder: embedding dimension for FFN (default: --encoder-ffn-embed-dim)",
                ),
                ("--decoder-layers DECODER_LAYERS", "decoder: number of layers (default: 6)"),
                (
                    "--decoder-attention-heads DECODER_ATTENTION_HEADS",
                    "decoder: number of attention heads (default: --encoder-attention-heads)",
                ),
                ("--decoder-normalize-before", "decoder: apply layernorm before each block (default: off)"),
                (
                    "--max-target-positions MAX_TARGET_POSITIONS",
                    "Maximum output length supported by the decoder (default: 1024)",
                ),
                ("--share-decoder-input-output-embed", "share decoder input and output embeddings (default: on)"),
                (
                    "--share-all-embeddings",
                    "share encoder, decoder and output embeddings (requires shared dictionary and embed dim) (default: on)",
                ),
                ("--no-scale-embedding", "if True, dont scale embeddings (default: off)"),
                ("--local-layers N", "local transformer layers inside paragraphs (Eq. 11-12; Section 4) (default: 5)"),
                (
                    "--global-layers N",
                    "global transformer layers across paragraphs on top of the local ones (Eq. 13-23; Section 4; 0 = Table 3's 'w/o GT') (default: 2)",
                ),
                (
                    "--global-heads N",
                    "heads of multi-head pooling and inter-paragraph attention (1 = Table 3's 'w/o MP') (default: --encoder-attention-heads)",
                ),
                (
                    "--no-paragraph-position",
                    "encode only the token position inside the paragraph, over all d dimensions (Table 3's 'w/o PP'); the paper concatenates paragraph rank and token position (default: off)",
                ),
                (
                    "--token-position-first",
                    "lay out the position encoding as [e_j ; e_i] (token position first), as the hiersumm code does; the paper writes [e_i ; e_j] (Eq. 9) (default: off)",
                ),
                (
                    "--shared-inter-paragraph-attention",
                    "one single-head attention shared by all heads in the inter-paragraph attention (the hiersumm code); the paper has per-head W^z_q, W^z_k, W^z_v (Eq. 17-19) (default: off)",
                ),
                (
                    "--no-pooling-head-projection",
                    "drop the per-head W^z_c of multi-head pooling (Eq. 16), as the hiersumm code does (default: off)",
                ),
                (
                    "--graph {none,similarity,discourse}",
                    "graph-informed attention (Eq. 24): replace --graph-heads learned inter-paragraph heads with the row-normalised paragraph graph read from side data src_graph_similarity / src_graph_discourse (mdsfair-preprocess --side-data graph_similarity|graph_discourse) (default: none)",
                ),
                (
                    "--graph-heads N",
                    "learned heads the graph replaces in every global layer (Eq. 24; the default is the paper's) (default: 1)",
                ),
                (
                    "--decoder-position-encoding {interleaved,fairseq}",
                    "target positions: 'interleaved' = Eq. 7-8 (sin at even, cos at odd dimensions, frequency 10000^(-2i/d), first token at position 0), as the paper and the hiersumm decoder; 'fairseq' = fairseq's SinusoidalPositionalEmbedding (sin half then cos half, from position 2) (default: interleaved)",
                ),
                (
                    "--decoder-output-bias",
                    "give the output projection a bias (its weight stays tied), as hiersumm's generator nn.Linear(d, V) (default: off)",
                ),
                (
                    "--decoder-start-symbol {eos,bos}",
                    "first decoder input: fairseq's </s> (eos) or <s> (bos), as hiersumm's targets start with <S> (default: eos)",
                ),
                (
                    "--layernorm-eps EPS",
                    "epsilon of every LayerNorm (the default is fairseq's; hiersumm 1e-6) (default: 1e-05)",
                ),
                (
                    "--no-source-special-tokens",
                    "the encoder skips the data contract's <s> / </s> source tokens (masked like padding, which equals removing them), so it reads exactly the paragraphs, as the hiersumm code (default: off)",
                ),
            ),
        ),
        "led": (
            "bart",
            (
                (
                    "--encoder-self-attention {full,document,longformer,dependency,lsh,sinkhorn}",
                    "encoder self attention component (mdsfair/modules/components.py) (default: longformer)",
                ),
                (
                    "--encoder-positions {learned,sinusoidal,pegasus-sinusoidal,document-restart,document-aware}",
                    "encoder positions component (mdsfair/modules/components.py) (default: learned)",
                ),
                (
                    "--cross-attention {full,document-scaled,sparse,hat,hepos}",
                    "cross attention component (mdsfair/modules/components.py) (default: full)",
                ),
                (
                    "--document-attention {blocked,dense}",
                    "implementation of the document encoder attention: 'blocked' computes attention per document block (memory grows with the longest document, Sec. 7), 'dense' masks a full T x T matrix as the authors did (same numbers) (default: blocked)",
                ),
                (
                    "--attention-window ATTENTION_WINDOW",
                    "Longformer window per encoder layer: one even number for all layers or a comma list with one per layer; window w lets each token see w/2 tokens on each side (Hugging Face's attention_window; 512 under the primera architecture, as the released checkpoints) (default: 1024)",
                ),
                (
                    "--global-attention {first,doc-sep,documents,none}",
                    "tokens with global attention: 'first' = the first source token (LED), 'doc-sep' = the first token and every <doc-sep> (PRIMERA; the primera architecture's), 'documents' = the first token of every document (from the data-bin's document ids), 'none' = no global token, the sliding window alone (LoBART; the attention has no global projections) (default: first)",
                ),
                (
                    "--longformer-attention {fused,banded}",
                    "computation of the encoder attention (same numbers): 'fused' = every window through torch's scaled_dot_product_attention with a shared band mask (fused kernels), 'banded' = explicit banded score tensors (the portable reference, as Hugging Face computes them) (default: fused)",
                ),
                (
                    "--dependency-encoder {mlp,linear,arithmetic,arithmetic-core,arithmetic-root}",
                    "relation encoding (Table VI): mlp = F_depEnc, Linear-LeakyReLU-Linear (the paper's, Eq. 7); linear = one linear layer; arithmetic[-core|-root] = fixed weights 1, (N-1)/N, ..., 1/N by relation frequency [core dependents first | ROOT first] (default: mlp)",
                ),
                (
                    "--dependency-encoder-hidden-dim DEPENDENCY_ENCODER_HIDDEN_DIM",
                    "hidden size of F_depEnc (not given in the paper) (default: 64)",
                ),
                (
                    "--dependency-leaky-relu-slope DEPENDENCY_LEAKY_RELU_SLOPE",
                    "negative slope of F_depEnc's LeakyReLU (PyTorch's; not given in the paper) (default: 0.01)",
                ),
                (
                    "--dependency-arc-direction {both,dependent-to-head,head-to-dependent}",
                    "which cells an arc fills: both (M_ij = M_ji), dependent-to-head (row = dependent) or head-to-dependent (default: both)",
                ),
                (
                    "--dependency-no-arc-encoding",
                    "give token pairs without an arc F_depEnc(0) (literal Eq. 5-6) instead of 0 (default: off)",
                ),
                (
                    "--dependency-mask-on {weights,values}",
                    "weights: A~ = M*A + A on the attention weights (Eq. 9, the paper's); values: out = A V + M V (Table VI 'added on values') (default: weights)",
                ),
                (
                    "--dependency-layers DEPENDENCY_LAYERS",
                    "encoder layers (0-based, comma-separated) whose self-attention uses the dependency mask, or 'all' (default: all)",
                ),
                (
                    "--efficient-attention-layers {hybrid,all}",
                    "lsh, sinkhorn: the encoder layers that take that attention: 'hybrid' = the second, fourth, ... layers, the others sliding-window attention (the authors' encoder unless --encoder_not_hybrid); 'all' = every encoder layer (default: hybrid)",
                ),
                (
                    "--hybrid-sliding-window N",
                    "lsh, sinkhorn under --efficient-attention-layers hybrid: the window of the sliding-window layers, even; each token sees window/2 tokens on each side (the authors' --window 128 on each side) (default: 256)",
                ),
                (
                    "--lsh-chunk-length N",
                    "LSH attention: slots per chunk of the sorted sequence; each chunk attends to itself and the chunk before (the authors' --bucket_size) (default: 64)",
                ),
                ("--lsh-hashes N", "LSH attention: hashing rounds, each with its own random rotation (default: 4)"),
                (
                    "--lsh-buckets N",
                    "LSH attention: buckets per hashing round (even); unset, the largest power of two not above 2 * (max source positions // chunk length), as the authors compute it",
                ),
                (
                    "--lsh-seed N",
                    "LSH attention: the seed of the random rotations of every forward in evaluation (default: 1)",
                ),
                (
                    "--sinkhorn-block-size N",
                    "Sinkhorn attention: tokens per block (the authors' --bucket_size) (default: 64)",
                ),
                (
                    "--sinkhorn-iterations N",
                    "Sinkhorn attention: row and column normalisations of the block sorting matrix (default: 7)",
                ),
                ("--sinkhorn-temperature T", "Sinkhorn attention: the Gumbel-Sinkhorn temperature (default: 0.7)"),
                (
                    "--sinkhorn-seed N",
                    "Sinkhorn attention: the seed of the Gumbel noise of every forward in evaluation (default: 1)",
                ),
                (
                    "--position-tiling {beltagy,authors,mirror}",
                    "how a shorter checkpoint position table is extended on load: 'beltagy' repeats the real positions (the paper, Sec. 5.3, after Longformer), 'authors' repeats the whole table including fairseq/HF's two offset rows as the authors' code does, 'mirror' alternates the whole table and its reverse as LoBART's code does (the lobart architectures' default) (default: beltagy)",
                ),
                (
                    "--doc-position-fn {sin,cos,sin-cos,scaled-sin-cos,linear,same,random}",
                    "document positional encoding function f_doc (Eq. 1; Tables IV, V): sin (the paper's), cos, sin-cos = iter(sin, cos) over dimensions, scaled-sin-cos = iter(sin(0.1k), cos(0.1k)), linear = slope*k, same = one value for all documents, random = fixed random value per document (default: sin)",
                ),
                (
                    "--doc-position-alpha DOC_POSITION_ALPHA",
                    "alpha of Eq. 2, the weight of the document encoding (the paper's) (default: 0.1)",
                ),
                (
                    "--doc-position-linear-slope DOC_POSITION_LINEAR_SLOPE",
                    "slope of --doc-position-fn linear (Table V: 1, 2, 5, 10) (default: 1.0)",
                ),
                (
                    "--doc-position-offset DOC_POSITION_OFFSET",
                    "k = 0-based document index + offset (0: the reading under which the paper's sin/cos comparison of Table IV holds; 1: k = 1..q as in its notation) (default: 0)",
                ),
                (
                    "--doc-token-positions {per-document,stream}",
                    "token position i of Eq. 1: per-document (restarts at every document, t_i^k) or stream (positions over the concatenated source) (default: per-document)",
                ),
                (
                    "--top-r R",
                    "sentences kept by every cross-attention query (Eq. 6; the paper's r on CNN/DailyMail); 0 keeps all (full attention) (default: 5)",
                ),
                (
                    "--sentence-selection {ideal,approx,random,mix}",
                    "saliency that ranks sentences: ideal (exact Eq. 4), approx (the approximator, Eq. 7, or the model-free Eq. 19), random, or mix (Sec. 4.3 scheduled sampling ideal->approx in training, one draw per forward pass shared by all layers; approx in evaluation and generation) (default: approx)",
                ),
                (
                    "--approximator {model-based,model-free}",
                    "model-based (BiGRU sentence encoder + W^Q/W^K, Eq. 8-10) or model-free (App. D Eq. 19, phi = ELU + 1, no parameters; the unnormalized scores, Z_m dropped, averaged over heads before top-r, as App. D and the authors' decoding) (default: model-based)",
                ),
                (
                    "--sentence-encoder {bigru,attention-pooling}",
                    "sentence encoder of the model-based approximator (f2 of Eq. 7): bigru, the bidirectional GRU of Eq. 10 (App. A.1), or attention-pooling, the cheaper hierarchical attention over each sentence's tokens that Sec. 4.5 proposes (multi-head pooling, no recurrence) (default: bigru)",
                ),
                (
                    "--sentence-encoder-layers N",
                    "layers of the bidirectional GRU sentence encoder (App. A.1) (default: 2)",
                ),
                (
                    "--sentence-encoder-hidden-dim D",
                    "hidden size per direction of the GRU (App. A.1: the model dimension, 1024 for BART-large) (default: --encoder-embed-dim)",
                ),
                (
                    "--share-selection-across-beams",
                    "average the sentence scores over the beam hypotheses of a source before top-r (the authors' decoding); off: every hypothesis selects its own sentences (default: off)",
                ),
                (
                    "--sparse-generation-path {auto,gather,mask}",
                    "how incremental generation reads the top-r sentences: gather their encoder states per hypothesis (cost ~ kept tokens * heads), mask the full per-source attention (cost ~ N, same output), or auto: gather at a step when the most tokens a hypothesis keeps * heads <= 2 * N (default: auto)",
                ),
                (
                    "--mix-decay-updates N",
                    "for --sentence-selection mix: use the exact saliency with probability max(0, 1 - update/N), else the approximation (Sec. 4.3: 1 - step/epoch_size, so N = the updates of one epoch)",
                ),
                (
                    "--hierarchical-sentence-layers N",
                    "Transformer encoder layers over the sentence-start states after the token encoder (HAT-BART, Rohde et al. 2021; 2 is this implementation's choice, see examples/hat_bart/README.md) (default: 2)",
                ),
                (
                    "--hepos-stride S",
                    "HEPOS stride s: head h of the cross-attention reads the source positions j with j mod s = h mod s, 1/s of the source (Huang et al. 2021, Sec. 3); s must divide the decoder's attention heads (default: 4)",
                ),
                (
                    "--max-encoder-positions MAX_ENCODER_POSITIONS",
                    "rows of the encoder's learned position table (16384 under the led architectures, 4096 under primera and hierencdec, as the released models); the task's --max-source-positions may not exceed it (default: 16384)",
                ),
            ),
        ),
        "lobart": (
            "bart",
            (
                (
                    "--encoder-self-attention {full,document,longformer,dependency,lsh,sinkhorn}",
                    "encoder self attention component (mdsfair/modules/components.py) (default: longformer)",
                ),
                (
                    "--encoder-positions {learned,sinusoidal,pegasus-sinusoidal,document-restart,document-aware}",
                    "encoder positions component (mdsfair/modules/components.py) (default: learned)",
                ),
                (
                    "--cross-attention {full,document-scaled,sparse,hat,hepos}",
                    "cross attention component (mdsfair/modules/components.py) (default: full)",
                ),
                (
                    "--document-attention {blocked,dense}",
                    "implementation of the document encoder attention: 'blocked' computes attention per document block (memory grows with the longest document, Sec. 7), 'dense' masks a full T x T matrix as the authors did (same numbers) (default: blocked)",
                ),
                (
                    "--attention-window ATTENTION_WINDOW",
                    "Longformer window per encoder layer: one even number for all layers or a comma list with one per layer; window w lets each token see w/2 tokens on each side (Hugging Face's attention_window; 512 under the primera architecture, as the released checkpoints) (default: 1024)",
                ),
                (
                    "--global-attention {first,doc-sep,documents,none}",
                    "tokens with global attention: 'first' = the first source token (LED), 'doc-sep' = the first token and every <doc-sep> (PRIMERA; the primera architecture's), 'documents' = the first token of every document (from the data-bin's document ids), 'none' = no global token, the sliding window alone (LoBART; the attention has no global projections) (default: none)",
                ),
                (
                    "--longformer-attention {fused,banded}",
                    "computation of the encoder attention (same numbers): 'fused' = every window through torch's scaled_dot_product_attention with a shared band mask (fused kernels), 'banded' = explicit banded score tensors (the portable reference, as Hugging Face computes them) (default: fused)",
                ),
                (
                    "--dependency-encoder {mlp,linear,arithmetic,arithmetic-core,arithmetic-root}",
                    "relation encoding (Table VI): mlp = F_depEnc, Linear-LeakyReLU-Linear (the paper's, Eq. 7); linear = one linear layer; arithmetic[-core|-root] = fixed weights 1, (N-1)/N, ..., 1/N by relation frequency [core dependents first | ROOT first] (default: mlp)",
                ),
                (
                    "--dependency-encoder-hidden-dim DEPENDENCY_ENCODER_HIDDEN_DIM",
                    "hidden size of F_depEnc (not given in the paper) (default: 64)",
                ),
                (
                    "--dependency-leaky-relu-slope DEPENDENCY_LEAKY_RELU_SLOPE",
                    "negative slope of F_depEnc's LeakyReLU (PyTorch's; not given in the paper) (default: 0.01)",
                ),
                (
                    "--dependency-arc-direction {both,dependent-to-head,head-to-dependent}",
                    "which cells an arc fills: both (M_ij = M_ji), dependent-to-head (row = dependent) or head-to-dependent (default: both)",
                ),
                (
                    "--dependency-no-arc-encoding",
                    "give token pairs without an arc F_depEnc(0) (literal Eq. 5-6) instead of 0 (default: off)",
                ),
                (
                    "--dependency-mask-on {weights,values}",
                    "weights: A~ = M*A + A on the attention weights (Eq. 9, the paper's); values: out = A V + M V (Table VI 'added on values') (default: weights)",
                ),
                (
                    "--dependency-layers DEPENDENCY_LAYERS",
                    "encoder layers (0-based, comma-separated) whose self-attention uses the dependency mask, or 'all' (default: all)",
                ),
                (
                    "--efficient-attention-layers {hybrid,all}",
                    "lsh, sinkhorn: the encoder layers that take that attention: 'hybrid' = the second, fourth, ... layers, the others sliding-window attention (the authors' encoder unless --encoder_not_hybrid); 'all' = every encoder layer (default: hybrid)",
                ),
                (
                    "--hybrid-sliding-window N",
                    "lsh, sinkhorn under --efficient-attention-layers hybrid: the window of the sliding-window layers, even; each token sees window/2 tokens on each side (the authors' --window 128 on each side) (default: 256)",
                ),
                (
                    "--lsh-chunk-length N",
                    "LSH attention: slots per chunk of the sorted sequence; each chunk attends to itself and the chunk before (the authors' --bucket_size) (default: 64)",
                ),
                ("--lsh-hashes N", "LSH attention: hashing rounds, each with its own random rotation (default: 4)"),
                (
                    "--lsh-buckets N",
                    "LSH attention: buckets per hashing round (even); unset, the largest power of two not above 2 * (max source positions // chunk length), as the authors compute it",
                ),
                (
                    "--lsh-seed N",
                    "LSH attention: the seed of the random rotations of every forward in evaluation (default: 1)",
                ),
                (
                    "--sinkhorn-block-size N",
                    "Sinkhorn attention: tokens per block (the authors' --bucket_size) (default: 64)",
                ),
                (
                    "--sinkhorn-iterations N",
                    "Sinkhorn attention: row and column normalisations of the block sorting matrix (default: 7)",
                ),
                ("--sinkhorn-temperature T", "Sinkhorn attention: the Gumbel-Sinkhorn temperature (default: 0.7)"),
                (
                    "--sinkhorn-seed N",
                    "Sinkhorn attention: the seed of the Gumbel noise of every forward in evaluation (default: 1)",
                ),
                (
                    "--position-tiling {beltagy,authors,mirror}",
                    "how a shorter checkpoint position table is extended on load: 'beltagy' repeats the real positions (the paper, Sec. 5.3, after Longformer), 'authors' repeats the whole table including fairseq/HF's two offset rows as the authors' code does, 'mirror' alternates the whole table and its reverse as LoBART's code does (the lobart architectures' default) (default: mirror)",
                ),
                (
                    "--doc-position-fn {sin,cos,sin-cos,scaled-sin-cos,linear,same,random}",
                    "document positional encoding function f_doc (Eq. 1; Tables IV, V): sin (the paper's), cos, sin-cos = iter(sin, cos) over dimensions, scaled-sin-cos = iter(sin(0.1k), cos(0.1k)), linear = slope*k, same = one value for all documents, random = fixed random value per document (default: sin)",
                ),
                (
                    "--doc-position-alpha DOC_POSITION_ALPHA",
                    "alpha of Eq. 2, the weight of the document encoding (the paper's) (default: 0.1)",
                ),
                (
                    "--doc-position-linear-slope DOC_POSITION_LINEAR_SLOPE",
                    "slope of --doc-position-fn linear (Table V: 1, 2, 5, 10) (default: 1.0)",
                ),
                (
                    "--doc-position-offset DOC_POSITION_OFFSET",
                    "k = 0-based document index + offset (0: the reading under which the paper's sin/cos comparison of Table IV holds; 1: k = 1..q as in its notation) (default: 0)",
                ),
                (
                    "--doc-token-positions {per-document,stream}",
                    "token position i of Eq. 1: per-document (restarts at every document, t_i^k) or stream (positions over the concatenated source) (default: per-document)",
                ),
                (
                    "--top-r R",
                    "sentences kept by every cross-attention query (Eq. 6; the paper's r on CNN/DailyMail); 0 keeps all (full attention) (default: 5)",
                ),
                (
                    "--sentence-selection {ideal,approx,random,mix}",
                    "saliency that ranks sentences: ideal (exact Eq. 4), approx (the approximator, Eq. 7, or the model-free Eq. 19), random, or mix (Sec. 4.3 scheduled sampling ideal->approx in training, one draw per forward pass shared by all layers; approx in evaluation and generation) (default: approx)",
                ),
                (
                    "--approximator {model-based,model-free}",
                    "model-based (BiGRU sentence encoder + W^Q/W^K, Eq. 8-10) or model-free (App. D Eq. 19, phi = ELU + 1, no parameters; the unnormalized scores, Z_m dropped, averaged over heads before top-r, as App. D and the authors' decoding) (default: model-based)",
                ),
                (
                    "--sentence-encoder {bigru,attention-pooling}",
                    "sentence encoder of the model-based approximator (f2 of Eq. 7): bigru, the bidirectional GRU of Eq. 10 (App. A.1), or attention-pooling, the cheaper hierarchical attention over each sentence's tokens that Sec. 4.5 proposes (multi-head pooling, no recurrence) (default: bigru)",
                ),
                (
                    "--sentence-encoder-layers N",
                    "layers of the bidirectional GRU sentence encoder (App. A.1) (default: 2)",
                ),
                (
                    "--sentence-encoder-hidden-dim D",
                    "hidden size per direction of the GRU (App. A.1: the model dimension, 1024 for BART-large) (default: --encoder-embed-dim)",
                ),
                (
                    "--share-selection-across-beams",
                    "average the sentence scores over the beam hypotheses of a source before top-r (the authors' decoding); off: every hypothesis selects its own sentences (default: off)",
                ),
                (
                    "--sparse-generation-path {auto,gather,mask}",
                    "how incremental generation reads the top-r sentences: gather their encoder states per hypothesis (cost ~ kept tokens * heads), mask the full per-source attention (cost ~ N, same output), or auto: gather at a step when the most tokens a hypothesis keeps * heads <= 2 * N (default: auto)",
                ),
                (
                    "--mix-decay-updates N",
                    "for --sentence-selection mix: use the exact saliency with probability max(0, 1 - update/N), else the approximation (Sec. 4.3: 1 - step/epoch_size, so N = the updates of one epoch)",
                ),
                (
                    "--hierarchical-sentence-layers N",
                    "Transformer encoder layers over the sentence-start states after the token encoder (HAT-BART, Rohde et al. 2021; 2 is this implementation's choice, see examples/hat_bart/README.md) (default: 2)",
                ),
                (
                    "--hepos-stride S",
                    "HEPOS stride s: head h of the cross-attention reads the source positions j with j mod s = h mod s, 1/s of the source (Huang et al. 2021, Sec. 3); s must divide the decoder's attention heads (default: 4)",
                ),
                (
                    "--max-encoder-positions MAX_ENCODER_POSITIONS",
                    "rows of the encoder's learned position table (16384 under the led architectures, 4096 under primera and hierencdec, as the released models); the task's --max-source-positions may not exceed it (default: 4096)",
                ),
            ),
        ),
        "lobart_mcs": (
            None,
            (
                ("--selector-embed-dim N", "word embedding dimension (encoder and decoder) (default: 256)"),
                (
                    "--selector-hidden-dim N",
                    "size of the sentence, word and decoder states (each bidirectional GRU direction has half) (default: 512)",
                ),
                (
                    "--selector-encoder-layers N",
                    "layers of the word-level GRU and of the sentence-level GRU (default: 2)",
                ),
                ("--selector-decoder-layers N", "layers of the decoder GRU (default: 1)"),
                (
                    "--dropout D",
                    "dropout between the layers of each GRU and before the labeller (the authors' places) (default: 0.1)",
                ),
                (
                    "--checkpoint-activations",
                    "checkpoint every GRU's activations: recompute them in the backward pass (default: off)",
                ),
                (
                    "--offload-activations",
                    "keep the checkpointed GRUs' saved inputs in CPU memory; implies --checkpoint-activations (default: off)",
                ),
            ),
        ),
        "longt5": (
            None,
            (
                ("--encoder-embed-dim N", "model dimension d_model (default: 768)"),
                ("--encoder-ffn-embed-dim N", "hidden size d_ff of the feed-forward (default: 2048)"),
                ("--encoder-attention-heads N", "attention heads (default: 12)"),
                ("--encoder-layers N", "encoder layers (default: 12)"),
                ("--decoder-layers N", "decoder layers (default: 12)"),
                ("--attention-head-dim N", "width d_kv of one attention head (default: 64)"),
                (
                    "--relative-attention-num-buckets N",
                    "buckets of the relative position bias, half of them for exact offsets (default: 32)",
                ),
                (
                    "--relative-attention-max-distance N",
                    "offsets from this distance on share the last bucket of the relative position bias (default: 128)",
                ),
                (
                    "--t5-feed-forward {relu,gated-gelu}",
                    "feed-forward block: relu (T5) or gated-gelu (T5 v1.1, tanh GELU) (default: gated-gelu)",
                ),
                (
                    "--encoder-self-attention {full,local,transient-global}",
                    "encoder self-attention: full (T5), or LongT5's local or transient-global (Guo et al. 2022, Sec. 2.1) (default: full)",
                ),
                (
                    "--local-radius R",
                    "LongT5: each token attends to the tokens within R positions of it (blocks of R + 1 tokens) (default: 127)",
                ),
                (
                    "--global-block-size K",
                    "LongT5 transient-global: one global token per block of K tokens, the sum of their states (default: 16)",
                ),
                (
                    "--share-decoder-input-output-embed",
                    "the output layer is the token embedding, unscaled (LongT5), not its own matrix (T5 v1.1) (default: off)",
                ),
                ("--layer-norm-eps EPS", "epsilon of the RMS layer norms (default: 1e-06)"),
                (
                    "--dropout P",
                    "dropout of the embeddings, attention probabilities, sub-layer outputs and feed-forward (default: 0.1)",
                ),
                (
                    "--checkpoint-activations",
                    "checkpoint every layer's activations: recompute them in the backward pass (default: off)",
                ),
                (
                    "--offload-activations",
                    "keep the checkpointed layers' saved inputs in CPU memory; implies --checkpoint-activations (default: off)",
                ),
            ),
        ),
        "multidoc_bart": (
            "bart",
            (
                (
                    "--encoder-self-attention {full,document,longformer,dependency,lsh,sinkhorn}",
                    "encoder self attention component (mdsfair/modules/components.py) (default: full)",
                ),
                (
                    "--encoder-positions {learned,sinusoidal,pegasus-sinusoidal,document-restart,document-aware}",
                    "encoder positions component (mdsfair/modules/components.py) (default: learned)",
                ),
                (
                    "--cross-attention {full,document-scaled,sparse,hat,hepos}",
                    "cross attention component (mdsfair/modules/components.py) (default: full)",
                ),
                (
                    "--document-attention {blocked,dense}",
                    "implementation of the document encoder attention: 'blocked' computes attention per document block (memory grows with the longest document, Sec. 7), 'dense' masks a full T x T matrix as the authors did (same numbers) (default: blocked)",
                ),
                (
                    "--attention-window ATTENTION_WINDOW",
                    "Longformer window per encoder layer: one even number for all layers or a comma list with one per layer; window w lets each token see w/2 tokens on each side (Hugging Face's attention_window; 512 under the primera architecture, as the released checkpoints) (default: 1024)",
                ),
                (
                    "--global-attention {first,doc-sep,documents,none}",
                    "tokens with global attention: 'first' = the first source token (LED), 'doc-sep' = the first token and every <doc-sep> (PRIMERA; the primera architecture's), 'documents' = the first token of every document (from the data-bin's document ids), 'none' = no global token, the sliding window alone (LoBART; the attention has no global projections) (default: first)",
                ),
                (
                    "--longformer-attention {fused,banded}",
                    "computation of the encoder attention (same numbers): 'fused' = every window through torch's scaled_dot_product_attention with a shared band mask (fused kernels), 'banded' = explicit banded score tensors (the portable reference, as Hugging Face computes them) (default: fused)",
                ),
                (
                    "--dependency-encoder {mlp,linear,arithmetic,arithmetic-core,arithmetic-root}",
                    "relation encoding (Table VI): mlp = F_depEnc, Linear-LeakyReLU-Linear (the paper's, Eq. 7); linear = one linear layer; arithmetic[-core|-root] = fixed weights 1, (N-1)/N, ..., 1/N by relation frequency [core dependents first | ROOT first] (default: mlp)",
                ),
                (
                    "--dependency-encoder-hidden-dim DEPENDENCY_ENCODER_HIDDEN_DIM",
                    "hidden size of F_depEnc (not given in the paper) (default: 64)",
                ),
                (
                    "--dependency-leaky-relu-slope DEPENDENCY_LEAKY_RELU_SLOPE",
                    "negative slope of F_depEnc's LeakyReLU (PyTorch's; not given in the paper) (default: 0.01)",
                ),
                (
                    "--dependency-arc-direction {both,dependent-to-head,head-to-dependent}",
                    "which cells an arc fills: both (M_ij = M_ji), dependent-to-head (row = dependent) or head-to-dependent (default: both)",
                ),
                (
                    "--dependency-no-arc-encoding",
                    "give token pairs without an arc F_depEnc(0) (literal Eq. 5-6) instead of 0 (default: off)",
                ),
                (
                    "--dependency-mask-on {weights,values}",
                    "weights: A~ = M*A + A on the attention weights (Eq. 9, the paper's); values: out = A V + M V (Table VI 'added on values') (default: weights)",
                ),
                (
                    "--dependency-layers DEPENDENCY_LAYERS",
                    "encoder layers (0-based, comma-separated) whose self-attention uses the dependency mask, or 'all' (default: all)",
                ),
                (
                    "--efficient-attention-layers {hybrid,all}",
                    "lsh, sinkhorn: the encoder layers that take that attention: 'hybrid' = the second, fourth, ... layers, the others sliding-window attention (the authors' encoder unless --encoder_not_hybrid); 'all' = every encoder layer (default: hybrid)",
                ),
                (
                    "--hybrid-sliding-window N",
                    "lsh, sinkhorn under --efficient-attention-layers hybrid: the window of the sliding-window layers, even; each token sees window/2 tokens on each side (the authors' --window 128 on each side) (default: 256)",
                ),
                (
                    "--lsh-chunk-length N",
                    "LSH attention: slots per chunk of the sorted sequence; each chunk attends to itself and the chunk before (the authors' --bucket_size) (default: 64)",
                ),
                ("--lsh-hashes N", "LSH attention: hashing rounds, each with its own random rotation (default: 4)"),
                (
                    "--lsh-buckets N",
                    "LSH attention: buckets per hashing round (even); unset, the largest power of two not above 2 * (max source positions // chunk length), as the authors compute it",
                ),
                (
                    "--lsh-seed N",
                    "LSH attention: the seed of the random rotations of every forward in evaluation (default: 1)",
                ),
                (
                    "--sinkhorn-block-size N",
                    "Sinkhorn attention: tokens per block (the authors' --bucket_size) (default: 64)",
                ),
                (
                    "--sinkhorn-iterations N",
                    "Sinkhorn attention: row and column normalisations of the block sorting matrix (default: 7)",
                ),
                ("--sinkhorn-temperature T", "Sinkhorn attention: the Gumbel-Sinkhorn temperature (default: 0.7)"),
                (
                    "--sinkhorn-seed N",
                    "Sinkhorn attention: the seed of the Gumbel noise of every forward in evaluation (default: 1)",
                ),
                (
                    "--position-tiling {beltagy,authors,mirror}",
                    "how a shorter checkpoint position table is extended on load: 'beltagy' repeats the real positions (the paper, Sec. 5.3, after Longformer), 'authors' repeats the whole table including fairseq/HF's two offset rows as the authors' code does, 'mirror' alternates the whole table and its reverse as LoBART's code does (the lobart architectures' default) (default: beltagy)",
                ),
                (
                    "--doc-position-fn {sin,cos,sin-cos,scaled-sin-cos,linear,same,random}",
                    "document positional encoding function f_doc (Eq. 1; Tables IV, V): sin (the paper's), cos, sin-cos = iter(sin, cos) over dimensions, scaled-sin-cos = iter(sin(0.1k), cos(0.1k)), linear = slope*k, same = one value for all documents, random = fixed random value per document (default: sin)",
                ),
                (
                    "--doc-position-alpha DOC_POSITION_ALPHA",
                    "alpha of Eq. 2, the weight of the document encoding (the paper's) (default: 0.1)",
                ),
                (
                    "--doc-position-linear-slope DOC_POSITION_LINEAR_SLOPE",
                    "slope of --doc-position-fn linear (Table V: 1, 2, 5, 10) (default: 1.0)",
                ),
                (
                    "--doc-position-offset DOC_POSITION_OFFSET",
                    "k = 0-based document index + offset (0: the reading under which the paper's sin/cos comparison of Table IV holds; 1: k = 1..q as in its notation) (default: 0)",
                ),
                (
                    "--doc-token-positions {per-document,stream}",
                    "token position i of Eq. 1: per-document (restarts at every document, t_i^k) or stream (positions over the concatenated source) (default: per-document)",
                ),
                (
                    "--top-r R",
                    "sentences kept by every cross-attention query (Eq. 6; the paper's r on CNN/DailyMail); 0 keeps all (full attention) (default: 5)",
                ),
                (
                    "--sentence-selection {ideal,approx,random,mix}",
                    "saliency that ranks sentences: ideal (exact Eq. 4), approx (the approximator, Eq. 7, or the model-free Eq. 19), random, or mix (Sec. 4.3 scheduled sampling ideal->approx in training, one draw per forward pass shared by all layers; approx in evaluation and generation) (default: approx)",
                ),
                (
                    "--approximator {model-based,model-free}",
                    "model-based (BiGRU sentence encoder + W^Q/W^K, Eq. 8-10) or model-free (App. D Eq. 19, phi = ELU + 1, no parameters; the unnormalized scores, Z_m dropped, averaged over heads before top-r, as App. D and the authors' decoding) (default: model-based)",
                ),
                (
                    "--sentence-encoder {bigru,attention-pooling}",
                    "sentence encoder of the model-based approximator (f2 of Eq. 7): bigru, the bidirectional GRU of Eq. 10 (App. A.1), or attention-pooling, the cheaper hierarchical attention over each sentence's tokens that Sec. 4.5 proposes (multi-head pooling, no recurrence) (default: bigru)",
                ),
                (
                    "--sentence-encoder-layers N",
                    "layers of the bidirectional GRU sentence encoder (App. A.1) (default: 2)",
                ),
                (
                    "--sentence-encoder-hidden-dim D",
                    "hidden size per direction of the GRU (App. A.1: the model dimension, 1024 for BART-large) (default: --encoder-embed-dim)",
                ),
                (
                    "--share-selection-across-beams",
                    "average the sentence scores over the beam hypotheses of a source before top-r (the authors' decoding); off: every hypothesis selects its own sentences (default: off)",
                ),
                (
                    "--sparse-generation-path {auto,gather,mask}",
                    "how incremental generation reads the top-r sentences: gather their encoder states per hypothesis (cost ~ kept tokens * heads), mask the full per-source attention (cost ~ N, same output), or auto: gather at a step when the most tokens a hypothesis keeps * heads <= 2 * N (default: auto)",
                ),
                (
                    "--mix-decay-updates N",
                    "for --sentence-selection mix: use the exact saliency with probability max(0, 1 - update/N), else the approximation (Sec. 4.3: 1 - step/epoch_size, so N = the updates of one epoch)",
                ),
                (
                    "--hierarchical-sentence-layers N",
                    "Transformer encoder layers over the sentence-start states after the token encoder (HAT-BART, Rohde et al. 2021; 2 is this implementation's choice, see examples/hat_bart/README.md) (default: 2)",
                ),
                (
                    "--hepos-stride S",
                    "HEPOS stride s: head h of the cross-attention reads the source positions j with j mod s = h mod s, 1/s of the source (Huang et al. 2021, Sec. 3); s must divide the decoder's attention heads (default: 4)",
                ),
                (
                    "--max-encoder-positions MAX_ENCODER_POSITIONS",
                    "rows of the encoder's learned position table (16384 under the led architectures, 4096 under primera and hierencdec, as the released models); the task's --max-source-positions may not exceed it (default: the model's --max-source-positions)",
                ),
            ),
        ),
        "pagesum_bart": (
            "bart",
            (
                (
                    "--locality {spatial,discourse,document}",
                    "how pages are formed (Sec. 3): 'spatial' = sentences in --num-pages equal chunks, 'discourse' = one page per discourse unit, 'document' = one page per document (the paper's choice for multi-document summarization, Table 5) (default: document)",
                ),
                (
                    "--num-pages NUM_PAGES",
                    "pages per example: the spatial chunk count, or the maximum number of discourse units / documents (the paper: 7 for arXiv/PubMed/MultiNews, 8 for arXiv sections, 20 for GovReport) (default: 7)",
                ),
                (
                    "--page-tokens PAGE_TOKENS",
                    "maximum tokens per page including <s> and </s> (the paper's page size, Sec. 5.2); longer pages are cut and counted (default: 1024)",
                ),
                (
                    "--max-page-positions MAX_PAGE_POSITIONS",
                    "rows of the encoder's learned position table (BART's pre-trained table); --page-tokens may not exceed it (default: 1024)",
                ),
                (
                    "--discourse-unit {paragraph,section}",
                    "discourse locality unit: 'paragraph', or 'section' = a document's titled group of paragraphs, e.g. an arXiv section given as one document with its title first (default: paragraph)",
                ),
                (
                    "--page-overflow {truncate,merge}",
                    "more discourse units/documents than --num-pages: 'truncate' keeps the first pages and counts the dropped units and tokens (the paper's maximum page count), 'merge' puts the rest into the last page (default: truncate)",
                ),
                (
                    "--spatial-remainder-to-last-page",
                    "authors' spatial chunking: every page gets S // num_pages sentences and the last page the remainder, so with fewer sentences than pages all of them are on the last page (off: chunk sizes differ by at most one sentence, the paper's equal split) (default: off)",
                ),
                (
                    "--empty-pages {mask,filler}",
                    "a page with no source text (fewer documents/units than --num-pages, or the authors' spatial chunking with fewer sentences than pages): 'mask' leaves it out of the softmax over pages (Eq. 8 over the pages the example has); 'filler' is the authors' data_utils.py: every example has --num-pages pages, an empty one holds '.' (<s> . </s>, the '.' ids from the data's subword model) and is weighted like any page; needed to run their checkpoints as trained (default: mask)",
                ),
                (
                    "--global-decoding",
                    "Table 7 alternative: encode pages separately but run one decoder over their concatenation (no confidence layer) (default: off)",
                ),
            ),
        ),
        "paragraph_ranker": (
            None,
            (
                ("--ranker-embed-dim N", "word embedding dimension (default: 256)"),
                ("--ranker-hidden-dim N", "hidden size of the title and paragraph LSTMs (Section 4) (default: 256)"),
                ("--dropout D", "dropout before every linear layer (Section 4) (default: 0.2)"),
                (
                    "--checkpoint-activations",
                    "recompute the LSTM states in the backward pass instead of storing them (less memory, more compute) (default: off)",
                ),
                (
                    "--offload-activations",
                    "--checkpoint-activations, keeping the saved LSTM inputs in CPU memory; sets --checkpoint-activations (default: off)",
                ),
            ),
        ),
        "pegasus": (
            "bart",
            (
                (
                    "--activation-fn {relu,gelu,gelu_fast,gelu_accurate,tanh,linear}",
                    "activation function to use (default: relu)",
                ),
                ("--dropout DROPOUT", "dropout probability (default: 0.1)"),
                ("--attention-dropout ATTENTION_DROPOUT", "dropout probability for attention weights (default: 0.1)"),
                (
                    "--activation-dropout ACTIVATION_DROPOUT",
                    "dropout probability after activation in FFN. (default: 0.1)",
                ),
                ("--encoder-normalize-before", "encoder: apply layernorm before each block (default: on)"),
                ("--encoder-learned-pos", "encoder: use learned positional embeddings (default: off)"),
                ("--decoder-normalize-before", "decoder: apply layernorm before each block (default: on)"),
                ("--decoder-learned-pos", "decoder: use learned positional embeddings (default: off)"),
                ("--share-decoder-input-output-embed", "share decoder input and output embeddings (default: on)"),
                (
                    "--share-all-embeddings",
                    "share encoder, decoder and output embeddings (requires shared dictionary and embed dim) (default: on)",
                ),
                ("--layernorm-embedding", "add layernorm to embedding (default: off)"),
                ("--no-scale-embedding", "if True, dont scale embeddings (default: off)"),
                (
                    "--encoder-self-attention {full,document,longformer,dependency,lsh,sinkhorn}",
                    "encoder self attention component (mdsfair/modules/components.py) (default: full)",
                ),
                (
                    "--encoder-positions {learned,sinusoidal,pegasus-sinusoidal,document-restart,document-aware}",
                    "encoder positions component (mdsfair/modules/components.py) (default: pegasus-sinusoidal)",
                ),
                (
                    "--cross-attention {full,document-scaled,sparse,hat,hepos}",
                    "cross attention component (mdsfair/modules/components.py) (default: full)",
                ),
                (
                    "--document-attention {blocked,dense}",
                    "implementation of the document encoder attention: 'blocked' computes attention per document block (memory grows with the longest document, Sec. 7), 'dense' masks a full T x T matrix as the authors did (same numbers) (default: blocked)",
                ),
                (
                    "--attention-window ATTENTION_WINDOW",
                    "Longformer window per encoder layer: one even number for all layers or a comma list with one per layer; window w lets each token see w/2 tokens on each side (Hugging Face's attention_window; 512 under the primera architecture, as the released checkpoints) (default: 1024)",
                ),
                (
                    "--global-attention {first,doc-sep,documents,none}",
                    "tokens with global attention: 'first' = the first source token (LED), 'doc-sep' = the first token and every <doc-sep> (PRIMERA; the primera architecture's), 'documents' = the first token of every document (from the data-bin's document ids), 'none' = no global token, the sliding window alone (LoBART; the attention has no global projections) (default: first)",
                ),
                (
                    "--longformer-attention {fused,banded}",
                    "computation of the encoder attention (same numbers): 'fused' = every window through torch's scaled_dot_product_attention with a shared band mask (fused kernels), 'banded' = explicit banded score tensors (the portable reference, as Hugging Face computes them) (default: fused)",
                ),
                (
                    "--dependency-encoder {mlp,linear,arithmetic,arithmetic-core,arithmetic-root}",
                    "relation encoding (Table VI): mlp = F_depEnc, Linear-LeakyReLU-Linear (the paper's, Eq. 7); linear = one linear layer; arithmetic[-core|-root] = fixed weights 1, (N-1)/N, ..., 1/N by relation frequency [core dependents first | ROOT first] (default: mlp)",
                ),
                (
                    "--dependency-encoder-hidden-dim DEPENDENCY_ENCODER_HIDDEN_DIM",
                    "hidden size of F_depEnc (not given in the paper) (default: 64)",
                ),
                (
                    "--dependency-leaky-relu-slope DEPENDENCY_LEAKY_RELU_SLOPE",
                    "negative slope of F_depEnc's LeakyReLU (PyTorch's; not given in the paper) (default: 0.01)",
                ),
                (
                    "--dependency-arc-direction {both,dependent-to-head,head-to-dependent}",
                    "which cells an arc fills: both (M_ij = M_ji), dependent-to-head (row = dependent) or head-to-dependent (default: both)",
                ),
                (
                    "--dependency-no-arc-encoding",
                    "give token pairs without an arc F_depEnc(0) (literal Eq. 5-6) instead of 0 (default: off)",
                ),
                (
                    "--dependency-mask-on {weights,values}",
                    "weights: A~ = M*A + A on the attention weights (Eq. 9, the paper's); values: out = A V + M V (Table VI 'added on values') (default: weights)",
                ),
                (
                    "--dependency-layers DEPENDENCY_LAYERS",
                    "encoder layers (0-based, comma-separated) whose self-attention uses the dependency mask, or 'all' (default: all)",
                ),
                (
                    "--efficient-attention-layers {hybrid,all}",
                    "lsh, sinkhorn: the encoder layers that take that attention: 'hybrid' = the second, fourth, ... layers, the others sliding-window attention (the authors' encoder unless --encoder_not_hybrid); 'all' = every encoder layer (default: hybrid)",
                ),
                (
                    "--hybrid-sliding-window N",
                    "lsh, sinkhorn under --efficient-attention-layers hybrid: the window of the sliding-window layers, even; each token sees window/2 tokens on each side (the authors' --window 128 on each side) (default: 256)",
                ),
                (
                    "--lsh-chunk-length N",
                    "LSH attention: slots per chunk of the sorted sequence; each chunk attends to itself and the chunk before (the authors' --bucket_size) (default: 64)",
                ),
                ("--lsh-hashes N", "LSH attention: hashing rounds, each with its own random rotation (default: 4)"),
                (
                    "--lsh-buckets N",
                    "LSH attention: buckets per hashing round (even); unset, the largest power of two not above 2 * (max source positions // chunk length), as the authors compute it",
                ),
                (
                    "--lsh-seed N",
                    "LSH attention: the seed of the random rotations of every forward in evaluation (default: 1)",
                ),
                (
                    "--sinkhorn-block-size N",
                    "Sinkhorn attention: tokens per block (the authors' --bucket_size) (default: 64)",
                ),
                (
                    "--sinkhorn-iterations N",
                    "Sinkhorn attention: row and column normalisations of the block sorting matrix (default: 7)",
                ),
                ("--sinkhorn-temperature T", "Sinkhorn attention: the Gumbel-Sinkhorn temperature (default: 0.7)"),
                (
                    "--sinkhorn-seed N",
                    "Sinkhorn attention: the seed of the Gumbel noise of every forward in evaluation (default: 1)",
                ),
                (
                    "--position-tiling {beltagy,authors,mirror}",
                    "how a shorter checkpoint position table is extended on load: 'beltagy' repeats the real positions (the paper, Sec. 5.3, after Longformer), 'authors' repeats the whole table including fairseq/HF's two offset rows as the authors' code does, 'mirror' alternates the whole table and its reverse as LoBART's code does (the lobart architectures' default) (default: beltagy)",
                ),
                (
                    "--doc-position-fn {sin,cos,sin-cos,scaled-sin-cos,linear,same,random}",
                    "document positional encoding function f_doc (Eq. 1; Tables IV, V): sin (the paper's), cos, sin-cos = iter(sin, cos) over dimensions, scaled-sin-cos = iter(sin(0.1k), cos(0.1k)), linear = slope*k, same = one value for all documents, random = fixed random value per document (default: sin)",
                ),
                (
                    "--doc-position-alpha DOC_POSITION_ALPHA",
                    "alpha of Eq. 2, the weight of the document encoding (the paper's) (default: 0.1)",
                ),
                (
                    "--doc-position-linear-slope DOC_POSITION_LINEAR_SLOPE",
                    "slope of --doc-position-fn linear (Table V: 1, 2, 5, 10) (default: 1.0)",
                ),
                (
                    "--doc-position-offset DOC_POSITION_OFFSET",
                    "k = 0-based document index + offset (0: the reading under which the paper's sin/cos comparison of Table IV holds; 1: k = 1..q as in its notation) (default: 0)",
                ),
                (
                    "--doc-token-positions {per-document,stream}",
                    "token position i of Eq. 1: per-document (restarts at every document, t_i^k) or stream (positions over the concatenated source) (default: per-document)",
                ),
                (
                    "--top-r R",
                    "sentences kept by every cross-attention query (Eq. 6; the paper's r on CNN/DailyMail); 0 keeps all (full attention) (default: 5)",
                ),
                (
                    "--sentence-selection {ideal,approx,random,mix}",
                    "saliency that ranks sentences: ideal (exact Eq. 4), approx (the approximator, Eq. 7, or the model-free Eq. 19), random, or mix (Sec. 4.3 scheduled sampling ideal->approx in training, one draw per forward pass shared by all layers; approx in evaluation and generation) (default: approx)",
                ),
                (
                    "--approximator {model-based,model-free}",
                    "model-based (BiGRU sentence encoder + W^Q/W^K, Eq. 8-10) or model-free (App. D Eq. 19, phi = ELU + 1, no parameters; the unnormalized scores, Z_m dropped, averaged over heads before top-r, as App. D and the authors' decoding) (default: model-based)",
                ),
                (
                    "--sentence-encoder {bigru,attention-pooling}",
                    "sentence encoder of the model-based approximator (f2 of Eq. 7): bigru, the bidirectional GRU of Eq. 10 (App. A.1), or attention-pooling, the cheaper hierarchical attention over each sentence's tokens that Sec. 4.5 proposes (multi-head pooling, no recurrence) (default: bigru)",
                ),
                (
                    "--sentence-encoder-layers N",
                    "layers of the bidirectional GRU sentence encoder (App. A.1) (default: 2)",
                ),
                (
                    "--sentence-encoder-hidden-dim D",
                    "hidden size per direction of the GRU (App. A.1: the model dimension, 1024 for BART-large) (default: --encoder-embed-dim)",
                ),
                (
                    "--share-selection-across-beams",
                    "average the sentence scores over the beam hypotheses of a source before top-r (the authors' decoding); off: every hypothesis selects its own sentences (default: off)",
                ),
                (
                    "--sparse-generation-path {auto,gather,mask}",
                    "how incremental generation reads the top-r sentences: gather their encoder states per hypothesis (cost ~ kept tokens * heads), mask the full per-source attention (cost ~ N, same output), or auto: gather at a step when the most tokens a hypothesis keeps * heads <= 2 * N (default: auto)",
                ),
                (
                    "--mix-decay-updates N",
                    "for --sentence-selection mix: use the exact saliency with probability max(0, 1 - update/N), else the approximation (Sec. 4.3: 1 - step/epoch_size, so N = the updates of one epoch)",
                ),
                (
                    "--hierarchical-sentence-layers N",
                    "Transformer encoder layers over the sentence-start states after the token encoder (HAT-BART, Rohde et al. 2021; 2 is this implementation's choice, see examples/hat_bart/README.md) (default: 2)",
                ),
                (
                    "--hepos-stride S",
                    "HEPOS stride s: head h of the cross-attention reads the source positions j with j mod s = h mod s, 1/s of the source (Huang et al. 2021, Sec. 3); s must divide the decoder's attention heads (default: 4)",
                ),
                (
                    "--max-encoder-positions MAX_ENCODER_POSITIONS",
                    "rows of the encoder's learned position table (16384 under the led architectures, 4096 under primera and hierencdec, as the released models); the task's --max-source-positions may not exceed it (default: the model's --max-source-positions)",
                ),
            ),
        ),
        "pointer_generator": (
            None,
            (
                ("--word-embed-dim N", "size of the word embeddings (Sec. 4) (default: 128)"),
                (
                    "--lstm-hidden-dim N",
                    "size of the decoder LSTM state and of each direction of the encoder LSTM (Sec. 4) (default: 256)",
                ),
                (
                    "--attention-hidden-dim N",
                    "size of W_h h_i + W_s s_t + w_c c_i in the attention score (Eq. 1, 11) (default: 2 x --lstm-hidden-dim)",
                ),
                (
                    "--no-coverage",
                    "the pointer-generator without coverage: no w_c c_i term in the attention (Eq. 1 instead of 11) (default: off)",
                ),
                (
                    "--dropout P",
                    "dropout on the word embeddings and the LSTM states (the paper uses none) (default: 0.0)",
                ),
                (
                    "--checkpoint-activations",
                    "checkpoint every LSTM layer's activations: recompute them in the backward pass",
                ),
                (
                    "--offload-activations",
                    "keep the checkpointed LSTM layers' saved inputs in CPU memory; implies --checkpoint-activations",
                ),
            ),
        ),
        "sparse_bart": (
            "bart",
            (
                (
                    "--encoder-self-attention {full,document,longformer,dependency,lsh,sinkhorn}",
                    "encoder self attention component (mdsfair/modules/components.py) (default: full)",
                ),
                (
                    "--encoder-positions {learned,sinusoidal,pegasus-sinusoidal,document-restart,document-aware}",
                    "encoder positions component (mdsfair/modules/components.py) (default: learned)",
                ),
                (
                    "--cross-attention {full,document-scaled,sparse,hat,hepos}",
                    "cross attention component (mdsfair/modules/components.py) (default: sparse)",
                ),
                (
                    "--document-attention {blocked,dense}",
                    "implementation of the document encoder attention: 'blocked' computes attention per document block (memory grows with the longest document, Sec. 7), 'dense' masks a full T x T matrix as the authors did (same numbers) (default: blocked)",
                ),
                (
                    "--attention-window ATTENTION_WINDOW",
                    "Longformer window per encoder layer: one even number for all layers or a comma list with one per layer; window w lets each token see w/2 tokens on each side (Hugging Face's attention_window; 512 under the primera architecture, as the released checkpoints) (default: 1024)",
                ),
                (
                    "--global-attention {first,doc-sep,documents,none}",
                    "tokens with global attention: 'first' = the first source token (LED), 'doc-sep' = the first token and every <doc-sep> (PRIMERA; the primera architecture's), 'documents' = the first token of every document (from the data-bin's document ids), 'none' = no global token, the sliding window alone (LoBART; the attention has no global projections) (default: first)",
                ),
                (
                    "--longformer-attention {fused,banded}",
                    "computation of the encoder attention (same numbers): 'fused' = every window through torch's scaled_dot_product_attention with a shared band mask (fused kernels), 'banded' = explicit banded score tensors (the portable reference, as Hugging Face computes them) (default: fused)",
                ),
                (
                    "--dependency-encoder {mlp,linear,arithmetic,arithmetic-core,arithmetic-root}",
                    "relation encoding (Table VI): mlp = F_depEnc, Linear-LeakyReLU-Linear (the paper's, Eq. 7); linear = one linear layer; arithmetic[-core|-root] = fixed weights 1, (N-1)/N, ..., 1/N by relation frequency [core dependents first | ROOT first] (default: mlp)",
                ),
                (
                    "--dependency-encoder-hidden-dim DEPENDENCY_ENCODER_HIDDEN_DIM",
                    "hidden size of F_depEnc (not given in the paper) (default: 64)",
                ),
                (
                    "--dependency-leaky-relu-slope DEPENDENCY_LEAKY_RELU_SLOPE",
                    "negative slope of F_depEnc's LeakyReLU (PyTorch's; not given in the paper) (default: 0.01)",
                ),
                (
                    "--dependency-arc-direction {both,dependent-to-head,head-to-dependent}",
                    "which cells an arc fills: both (M_ij = M_ji), dependent-to-head (row = dependent) or head-to-dependent (default: both)",
                ),
                (
                    "--dependency-no-arc-encoding",
                    "give token pairs without an arc F_depEnc(0) (literal Eq. 5-6) instead of 0 (default: off)",
                ),
                (
                    "--dependency-mask-on {weights,values}",
                    "weights: A~ = M*A + A on the attention weights (Eq. 9, the paper's); values: out = A V + M V (Table VI 'added on values') (default: weights)",
                ),
                (
                    "--dependency-layers DEPENDENCY_LAYERS",
                    "encoder layers (0-based, comma-separated) whose self-attention uses the dependency mask, or 'all' (default: all)",
                ),
                (
                    "--efficient-attention-layers {hybrid,all}",
                    "lsh, sinkhorn: the encoder layers that take that attention: 'hybrid' = the second, fourth, ... layers, the others sliding-window attention (the authors' encoder unless --encoder_not_hybrid); 'all' = every encoder layer (default: hybrid)",
                ),
                (
                    "--hybrid-sliding-window N",
                    "lsh, sinkhorn under --efficient-attention-layers hybrid: the window of the sliding-window layers, even; each token sees window/2 tokens on each side (the authors' --window 128 on each side) (default: 256)",
                ),
                (
                    "--lsh-chunk-length N",
                    "LSH attention: slots per chunk of the sorted sequence; each chunk attends to itself and the chunk before (the authors' --bucket_size) (default: 64)",
                ),
                ("--lsh-hashes N", "LSH attention: hashing rounds, each with its own random rotation (default: 4)"),
                (
                    "--lsh-buckets N",
                    "LSH attention: buckets per hashing round (even); unset, the largest power of two not above 2 * (max source positions // chunk length), as the authors compute it",
                ),
                (
                    "--lsh-seed N",
                    "LSH attention: the seed of the random rotations of every forward in evaluation (default: 1)",
                ),
                (
                    "--sinkhorn-block-size N",
                    "Sinkhorn attention: tokens per block (the authors' --bucket_size) (default: 64)",
                ),
                (
                    "--sinkhorn-iterations N",
                    "Sinkhorn attention: row and column normalisations of the block sorting matrix (default: 7)",
                ),
                ("--sinkhorn-temperature T", "Sinkhorn attention: the Gumbel-Sinkhorn temperature (default: 0.7)"),
                (
                    "--sinkhorn-seed N",
                    "Sinkhorn attention: the seed of the Gumbel noise of every forward in evaluation (default: 1)",
                ),
                (
                    "--position-tiling {beltagy,authors,mirror}",
                    "how a shorter checkpoint position table is extended on load: 'beltagy' repeats the real positions (the paper, Sec. 5.3, after Longformer), 'authors' repeats the whole table including fairseq/HF's two offset rows as the authors' code does, 'mirror' alternates the whole table and its reverse as LoBART's code does (the lobart architectures' default) (default: beltagy)",
                ),
                (
                    "--doc-position-fn {sin,cos,sin-cos,scaled-sin-cos,linear,same,random}",
                    "document positional encoding function f_doc (Eq. 1; Tables IV, V): sin (the paper's), cos, sin-cos = iter(sin, cos) over dimensions, scaled-sin-cos = iter(sin(0.1k), cos(0.1k)), linear = slope*k, same = one value for all documents, random = fixed random value per document (default: sin)",
                ),
                (
                    "--doc-position-alpha DOC_POSITION_ALPHA",
                    "alpha of Eq. 2, the weight of the document encoding (the paper's) (default: 0.1)",
                ),
                (
                    "--doc-position-linear-slope DOC_POSITION_LINEAR_SLOPE",
                    "slope of --doc-position-fn linear (Table V: 1, 2, 5, 10) (default: 1.0)",
                ),
                (
                    "--doc-position-offset DOC_POSITION_OFFSET",
                    "k = 0-based document index + offset (0: the reading under which the paper's sin/cos comparison of Table IV holds; 1: k = 1..q as in its notation) (default: 0)",
                ),
                (
                    "--doc-token-positions {per-document,stream}",
                    "token position i of Eq. 1: per-document (restarts at every document, t_i^k) or stream (positions over the concatenated source) (default: per-document)",
                ),
                (
                    "--top-r R",
                    "sentences kept by every cross-attention query (Eq. 6; the paper's r on CNN/DailyMail); 0 keeps all (full attention) (default: 5)",
                ),
                (
                    "--sentence-selection {ideal,approx,random,mix}",
                    "saliency that ranks sentences: ideal (exact Eq. 4), approx (the approximator, Eq. 7, or the model-free Eq. 19), random, or mix (Sec. 4.3 scheduled sampling ideal->approx in training, one draw per forward pass shared by all layers; approx in evaluation and generation) (default: approx)",
                ),
                (
                    "--approximator {model-based,model-free}",
                    "model-based (BiGRU sentence encoder + W^Q/W^K, Eq. 8-10) or model-free (App. D Eq. 19, phi = ELU + 1, no parameters; the unnormalized scores, Z_m dropped, averaged over heads before top-r, as App. D and the authors' decoding) (default: model-based)",
                ),
                (
                    "--sentence-encoder {bigru,attention-pooling}",
                    "sentence encoder of the model-based approximator (f2 of Eq. 7): bigru, the bidirectional GRU of Eq. 10 (App. A.1), or attention-pooling, the cheaper hierarchical attention over each sentence's tokens that Sec. 4.5 proposes (multi-head pooling, no recurrence) (default: bigru)",
                ),
                (
                    "--sentence-encoder-layers N",
                    "layers of the bidirectional GRU sentence encoder (App. A.1) (default: 2)",
                ),
                (
                    "--sentence-encoder-hidden-dim D",
                    "hidden size per direction of the GRU (App. A.1: the model dimension, 1024 for BART-large) (default: --encoder-embed-dim)",
                ),
                (
                    "--share-selection-across-beams",
                    "average the sentence scores over the beam hypotheses of a source before top-r (the authors' decoding); off: every hypothesis selects its own sentences (default: off)",
                ),
                (
                    "--sparse-generation-path {auto,gather,mask}",
                    "how incremental generation reads the top-r sentences: gather their encoder states per hypothesis (cost ~ kept tokens * heads), mask the full per-source attention (cost ~ N, same output), or auto: gather at a step when the most tokens a hypothesis keeps * heads <= 2 * N (default: auto)",
                ),
                (
                    "--mix-decay-updates N",
                    "for --sentence-selection mix: use the exact saliency with probability max(0, 1 - update/N), else the approximation (Sec. 4.3: 1 - step/epoch_size, so N = the updates of one epoch)",
                ),
                (
                    "--hierarchical-sentence-layers N",
                    "Transformer encoder layers over the sentence-start states after the token encoder (HAT-BART, Rohde et al. 2021; 2 is this implementation's choice, see examples/hat_bart/README.md) (default: 2)",
                ),
                (
                    "--hepos-stride S",
                    "HEPOS stride s: head h of the cross-attention reads the source positions j with j mod s = h mod s, 1/s of the source (Huang et al. 2021, Sec. 3); s must divide the decoder's attention heads (default: 4)",
                ),
                (
                    "--max-encoder-positions MAX_ENCODER_POSITIONS",
                    "rows of the encoder's learned position table (16384 under the led architectures, 4096 under primera and hierencdec, as the released models); the task's --max-source-positions may not exceed it (default: the model's --max-source-positions)",
                ),
            ),
        ),
        "t5_v1_1": (
            None,
            (
                ("--encoder-embed-dim N", "model dimension d_model (default: 768)"),
                ("--encoder-ffn-embed-dim N", "hidden size d_ff of the feed-forward (default: 2048)"),
                ("--encoder-attention-heads N", "attention heads (default: 12)"),
                ("--encoder-layers N", "encoder layers (default: 12)"),
                ("--decoder-layers N", "decoder layers (default: 12)"),
                ("--attention-head-dim N", "width d_kv of one attention head (default: 64)"),
                (
                    "--relative-attention-num-buckets N",
                    "buckets of the relative position bias, half of them for exact offsets (default: 32)",
                ),
                (
                    "--relative-attention-max-distance N",
                    "offsets from this distance on share the last bucket of the relative position bias (default: 128)",
                ),
                (
                    "--t5-feed-forward {relu,gated-gelu}",
                    "feed-forward block: relu (T5) or gated-gelu (T5 v1.1, tanh GELU) (default: gated-gelu)",
                ),
                (
                    "--encoder-self-attention {full,local,transient-global}",
                    "encoder self-attention: full (T5), or LongT5's local or transient-global (Guo et al. 2022, Sec. 2.1) (default: full)",
                ),
                (
                    "--local-radius R",
                    "LongT5: each token attends to the tokens within R positions of it (blocks of R + 1 tokens) (default: 127)",
                ),
                (
                    "--global-block-size K",
                    "LongT5 transient-global: one global token per block of K tokens, the sum of their states (default: 16)",
                ),
                (
                    "--share-decoder-input-output-embed",
                    "the output layer is the token embedding, unscaled (LongT5), not its own matrix (T5 v1.1) (default: off)",
                ),
                ("--layer-norm-eps EPS", "epsilon of the RMS layer norms (default: 1e-06)"),
                (
                    "--dropout P",
                    "dropout of the embeddings, attention probabilities, sub-layer outputs and feed-forward (default: 0.1)",
                ),
                (
                    "--checkpoint-activations",
                    "checkpoint every layer's activations: recompute them in the backward pass (default: off)",
                ),
                (
                    "--offload-activations",
                    "keep the checkpointed layers' saved inputs in CPU memory; implies --checkpoint-activations (default: off)",
                ),
            ),
        ),
        "tdmca": (
            None,
            (
                ("--decoder-embed-dim N", "model dimension d (default: 512)"),
                ("--decoder-ffn-embed-dim N", "hidden size of the feed-forward blocks (default: 2048)"),
                ("--decoder-attention-heads N", "attention heads (default: 8)"),
                (
                    "--layer-pattern PATTERN",
                    "one letter per layer, bottom first: L = local attention, M = memory-compressed attention, F = full causal attention (LMLML: tensor2tensor's T-DMCA pattern; FFFFF: a Transformer decoder T-D) (default: LMLML)",
                ),
                (
                    "--block-length N",
                    "tokens per block of the local attention; a query sees its block and the previous one (default: 256)",
                ),
                (
                    "--compression-factor N",
                    "kernel size and stride of the convolutions that compress the keys and values of the memory-compressed attention (default: 3)",
                ),
                ("--dropout P", "dropout (default: 0.1)"),
                ("--attention-dropout P", "dropout of the attention probabilities (default: 0.1)"),
                ("--activation-dropout P", "dropout after the feed-forward activation (default: 0.1)"),
                (
                    "--checkpoint-activations",
                    "checkpoint every layer's activations: recompute them in the backward pass (default: off)",
                ),
                (
                    "--offload-activations",
                    "keep the checkpointed layers' saved inputs in CPU memory; implies --checkpoint-activations (default: off)",
                ),
            ),
        ),
    },
    "criterion": {
        "content_selection": (
            None,
            (
                (
                    "--extraction-weight EXTRACTION_WEIGHT",
                    "gamma of L = (1 - gamma) L_seq2seq + gamma L_ext, in [0, 1] (0.2 in the authors' conf/hiermodel_v1.txt) (default: 0.2)",
                ),
            ),
        ),
        "paragraph_ranking": (
            None,
            (),
        ),
        "pointer_generator_coverage": (
            "label_smoothed_cross_entropy",
            (
                (
                    "--coverage-weight COVERAGE_WEIGHT",
                    "lambda of the coverage loss term (Eq. 13; the paper uses 1) (default: 1.0)",
                ),
            ),
        ),
        "sparse_kl": (
            "label_smoothed_cross_entropy",
            (
                (
                    "--kl-weight KL_WEIGHT",
                    "lambda of the integrated loss L_I = L_xent + lambda * L_KL (Eq. 12; paper 0.2) (default: 0.2)",
                ),
                (
                    "--kl-temperature KL_TEMPERATURE",
                    "temperature T re-sharpening the exact saliency target, softmax(log(alpha)/T) (Eq. 15; paper 0.5) (default: 0.5)",
                ),
                (
                    "--kl-reduction {mean-over-sentences,sum-over-sentences}",
                    "scale of the per-token KL (Eq. 11): mean-over-sentences divides it by the example's sentence count N1, as the authors' KLDivLoss(reduction='mean') over [H*T, N1] elements, the scale on which the paper tuned lambda = 0.2; sum-over-sentences is the KL as written in Eq. 11, N1 times larger (default: mean-over-sentences)",
                ),
                (
                    "--kl-detach-teacher",
                    "detach the exact saliency target of the KL: theta_dec then gets no KL gradient through alpha^s (by default it does, as Eq. 13 and the authors' code)",
                ),
                (
                    "--entropy-sparsity-weight ENTROPY_SPARSITY_WEIGHT",
                    "gamma of the entropy sparsity loss L_A = L_xent + gamma * L_sparse (Eq. 5); 0 disables it (the paper fine-tunes with 0.1 or 1.0 to make attention sparse) (default: 0.0)",
                ),
            ),
        ),
    },
}

#: kind -> the registered name of a fairseq class mdsfair's extend (or that such a class extends) -> (the fairseq class it extends, by its registered name, or None; its options that class lacks or describes otherwise: mdsfair.cli_help.fairseq_options reads them back whole)
FAIRSEQ = {
    "task": {},
    "model": {
        "transformer": (
            None,
            (
                ("--activation-fn {relu,gelu,gelu_fast,gelu_accurate,tanh,linear}", "activation function to use"),
                ("--dropout DROPOUT", "dropout probability"),
                ("--attention-dropout ATTENTION_DROPOUT", "dropout probability for attention weights"),
                ("--activation-dropout ACTIVATION_DROPOUT", "dropout probability after activation in FFN."),
                ("--adaptive-input", ""),
                ("--encoder-embed-path ENCODER_EMBED_PATH", "encoder: path to pre-trained embedding"),
                ("--encoder-embed-dim ENCODER_EMBED_DIM", "encoder: embedding dimension"),
                ("--encoder-ffn-embed-dim ENCODER_FFN_EMBED_DIM", "encoder: embedding dimension for FFN"),
                ("--encoder-layers ENCODER_LAYERS", "encoder: number of layers"),
                ("--encoder-attention-heads ENCODER_ATTENTION_HEADS", "encoder: number of attention heads"),
                ("--encoder-normalize-before", "encoder: apply layernorm before each block"),
                ("--encoder-learned-pos", "encoder: use learned positional embeddings"),
                ("--encoder-layerdrop ENCODER_LAYERDROP", "encoder: LayerDrop probability"),
                ("--encoder-layers-to-keep ENCODER_LAYERS_TO_KEEP", "encoder: which layers to *keep* when pruning"),
                (
                    "--encoder-xformers-att-config ENCODER_XFORMERS_ATT_CONFIG",
                    "encoder: config for xFormers attention, defined in xformers.components.attention.AttentionConfig",
                ),
                ("--max-source-positions MAX_SOURCE_POSITIONS", "Maximum input length supported by the encoder"),
                ("--decoder-embed-path DECODER_EMBED_PATH", "decoder: path to pre-trained embedding"),
                ("--decoder-embed-dim DECODER_EMBED_DIM", "decoder: embedding dimension"),
                ("--decoder-ffn-embed-dim DECODER_FFN_EMBED_DIM", "decoder: embedding dimension for FFN"),
                ("--decoder-layers DECODER_LAYERS", "decoder: number of layers"),
                ("--decoder-attention-heads DECODER_ATTENTION_HEADS", "decoder: number of attention heads"),
                ("--decoder-normalize-before", "decoder: apply layernorm before each block"),
                ("--decoder-learned-pos", "decoder: use learned positional embeddings"),
                ("--decoder-layerdrop DECODER_LAYERDROP", "decoder: LayerDrop probability"),
                ("--decoder-layers-to-keep DECODER_LAYERS_TO_KEEP", "decoder: which layers to *keep* when pruning"),
                (
                    "--decoder-xformers-att-config DECODER_XFORMERS_ATT_CONFIG",
                    "decoder: config for xFormers attention, defined in xformers.components.attention.AttentionConfig",
                ),
                (
                    "--decoder-output-dim DECODER_OUTPUT_DIM",
                    "decoder: decoder output dimension (extra linear layer if different from decoder embed dim)",
                ),
                ("--max-target-positions MAX_TARGET_POSITIONS", "Maximum output length supported by the decoder"),
                ("--share-decoder-input-output-embed", "share decoder input and output embeddings"),
                (
                    "--share-all-embeddings",
                    "share encoder, decoder and output embeddings (requires shared dictionary and embed dim)",
                ),
                (
                    "--merge-src-tgt-embed",
                    "if true then the source and target embedding table is merged into one table. This is going to make the model smaller but it might hurt performance.",
                ),
                (
                    "--no-token-positional-embeddings",
                    "if True, disables positional embeddings (outside self attention)",
                ),
                (
                    "--adaptive-softmax-cutoff ADAPTIVE_SOFTMAX_CUTOFF",
                    "list of adaptive softmax cutoff points. Must be used with adaptive_loss criterion",
                ),
                (
                    "--adaptive-softmax-dropout ADAPTIVE_SOFTMAX_DROPOUT",
                    "sets adaptive softmax dropout for the tail projections",
                ),
                ("--adaptive-softmax-factor ADAPTIVE_SOFTMAX_FACTOR", "adaptive input factor"),
                ("--layernorm-embedding", "add layernorm to embedding"),
                ("--tie-adaptive-weights", "if set, ties the weights of adaptive softmax and adaptive input"),
                ("--tie-adaptive-proj", "if set, ties the projection weights of adaptive softmax and adaptive input"),
                ("--no-scale-embedding", "if True, dont scale embeddings"),
                (
                    "--checkpoint-activations",
                    "checkpoint activations at each layer, which saves GPU memory usage at the cost of some additional compute",
                ),
                (
                    "--offload-activations",
                    "checkpoint activations at each layer, then save to gpu. Sets --checkpoint-activations.",
                ),
                ("--no-cross-attention", "do not perform cross-attention"),
                ("--cross-self-attention", "perform cross+self-attention"),
                ("--quant-noise-pq QUANT_NOISE_PQ", "quant-noise: iterative PQ quantization noise at training time"),
                (
                    "--quant-noise-pq-block-size QUANT_NOISE_PQ_BLOCK_SIZE",
                    "quant-noise: block size of quantization noise at training time",
                ),
                (
                    "--quant-noise-scalar QUANT_NOISE_SCALAR",
                    "quant-noise: scalar quantization noise and scalar quantization at training time",
                ),
                (
                    "--min-params-to-wrap MIN_PARAMS_TO_WRAP",
                    "minimum number of params for a layer to be wrapped with FSDP() when training with --ddp-backend=fully_sharded. Smaller values will improve memory efficiency, but may make torch.distributed communication less efficient due to smaller input sizes. This option is set to 0 (i.e., always wrap) when --checkpoint-activations or --offload-activations are passed.",
                ),
                ("--char-inputs", "if set, model takes character ids as input"),
                ("--relu-dropout RELU_DROPOUT", ""),
                ("--base-layers BASE_LAYERS", "number of BASE layers in total"),
                ("--base-sublayers BASE_SUBLAYERS", "number of sublayers in each BASE layer"),
                ("--base-shuffle BASE_SHUFFLE", "shuffle tokens between workers before computing assignment"),
                ("--export", "make the layernorm exportable with torchscript."),
                ("--no-decoder-final-norm", "don't add an extra layernorm after the last decoder block"),
            ),
        ),
        "transformer_pointer_generator": (
            "transformer",
            (
                ("--alignment-heads N", "number of attention heads to be used for pointing"),
                (
                    "--alignment-layer I",
                    "layer number to be used for pointing (0 corresponding to the bottommost layer)",
                ),
                (
                    "--source-position-markers N",
                    "dictionary includes N additional items that represent an OOV token at a particular input position",
                ),
                (
                    "--force-generation P",
                    "set the vocabulary distribution weight to P, instead of predicting it from the input (1.0 corresponding to generation, 0.0 to pointing)",
                ),
            ),
        ),
        "bart": (
            "transformer",
            (
                ("--pooler-dropout D", "dropout probability in the masked_lm pooler layers"),
                (
                    "--pooler-activation-fn {relu,gelu,gelu_fast,gelu_accurate,tanh,linear}",
                    "activation function to use for pooler layer",
                ),
                ("--spectral-norm-classification-head", "Apply spectral normalization on the classification head"),
            ),
        ),
    },
    "criterion": {
        "label_smoothed_cross_entropy": (
            None,
            (
                (
                    "--label-smoothing LABEL_SMOOTHING",
                    "epsilon for label smoothing, 0 means no label smoothing (default: 0.0)",
                ),
                ("--report-accuracy", "report accuracy metric"),
                ("--ignore-prefix-size IGNORE_PREFIX_SIZE", "Ignore first N tokens (default: 0)"),
            ),
        ),
    },
}

#: mdsfair's model -> its architectures
ARCHITECTURES = {
    "copy_transformer": ("copy_transformer", "copy_transformer_tiny"),
    "dape_transformer": ("dape_transformer", "dape_transformer_tiny"),
    "hat_bart": ("hat_bart_large", "hat_bart_tiny"),
    "hepos_bart": ("hepos_bart_large", "hepos_bart_tiny"),
    "hierencdec_bart": (
        "hierencdec_bart_base",
        "hierencdec_bart_large",
        "hierencdec_bart_tiny",
        "primera_hierencdec",
        "primera_hierencdec_tiny",
    ),
    "hiertransformer": ("hiertransformer", "hiertransformer_hiersumm", "hiertransformer_tiny"),
    "led": ("led_base", "led_large", "led_tiny", "primera"),
    "lobart": ("lobart_4k", "lobart_tiny"),
    "lobart_mcs": ("lobart_mcs", "lobart_mcs_tiny"),
    "longt5": ("longt5_local_base", "longt5_local_tiny", "longt5_tglobal_base", "longt5_tglobal_large", "longt5_tiny"),
    "multidoc_bart": (
        "lsh_bart_large",
        "lsh_bart_tiny",
        "multidoc_bart_base",
        "multidoc_bart_large",
        "multidoc_bart_tiny",
        "sinkhorn_bart_large",
        "sinkhorn_bart_tiny",
    ),
    "pagesum_bart": ("pagesum_bart_base", "pagesum_bart_large", "pagesum_bart_tiny"),
    "paragraph_ranker": ("paragraph_ranker", "paragraph_ranker_tiny"),
    "pegasus": ("pegasus_large", "pegasus_tiny"),
    "pointer_generator": ("pointer_generator_see2017", "pointer_generator_tiny"),
    "sparse_bart": (
        "hierencdec_sparse",
        "hierencdec_sparse_tiny",
        "led_sparse",
        "led_sparse_tiny",
        "lobart_4k_sparse",
        "lobart_4k_sparse_tiny",
        "sparse_bart_base",
        "sparse_bart_large",
        "sparse_bart_tiny",
    ),
    "t5_v1_1": ("t5_v1_1_base", "t5_v1_1_large", "t5_v1_1_small", "t5_v1_1_tiny"),
    "tdmca": ("tdmca", "tdmca_tiny"),
}

#: fairseq's model that mdsfair's extend -> its architectures
FAIRSEQ_ARCHITECTURES = {
    "bart": ("bart_base", "bart_large", "mbart_base", "mbart_base_wmt20", "mbart_large"),
    "transformer": (
        "transformer",
        "transformer_iwslt_de_en",
        "transformer_tiny",
        "transformer_vaswani_wmt_en_de_big",
        "transformer_vaswani_wmt_en_fr_big",
        "transformer_wmt_en_de",
        "transformer_wmt_en_de_big",
        "transformer_wmt_en_de_big_t2t",
    ),
    "transformer_pointer_generator": (
        "transformer_pointer_generator",
        "transformer_pointer_generator_iwslt_de_en",
        "transformer_pointer_generator_vaswani_wmt_en_de_big",
        "transformer_pointer_generator_vaswani_wmt_en_fr_big",
        "transformer_pointer_generator_wmt_en_de",
        "transformer_pointer_generator_wmt_en_de_big",
        "transformer_pointer_generator_wmt_en_de_big_t2t",
    ),
}

#: command -> the fairseq options its short help lists (mdsfair.cli_help.COMMON_OPTIONS)
COMMON = {
    "mdsfair-train": (
        ("--arch, -a ARCH", "model architecture"),
        ("--max-tokens MAX_TOKENS", "maximum number of tokens in a batch"),
        ("--batch-size, --max-sentences BATCH_SIZE", "number of examples in a batch"),
        ("--update-freq UPDATE_FREQ", "update parameters every N_i batches, when in epoch i (default: 1)"),
        (
            "--lr LR",
            "learning rate for the first N epochs; all epochs >N using LR_N (note: this may be interpreted differently depending on --lr-scheduler) (default: 0.25)",
        ),
        ("--max-epoch MAX_EPOCH", "force stop training at specified epoch (default: 0)"),
        ("--max-update MAX_UPDATE", "force stop training at specified update (default: 0)"),
        ("--save-dir SAVE_DIR", "path to save checkpoints (default: checkpoints)"),
        (
            "--restore-file RESTORE_FILE",
            "filename from which to load checkpoint (default: <save-dir>/checkpoint_last.pt",
        ),
        ("--keep-last-epochs KEEP_LAST_EPOCHS", "keep last N epoch checkpoints (default: -1)"),
        (
            "--patience PATIENCE",
            "early stop training if valid performance doesn't improve for N consecutive validation runs; note that this is influenced by --validate-interval (default: -1)",
        ),
        ("--seed SEED", "pseudo random number generator seed (default: 1)"),
        ("--cpu", "use CPU instead of CUDA"),
        ("--fp16", "use FP16"),
        ("--num-workers NUM_WORKERS", "how many subprocesses to use for data loading (default: 1)"),
    ),
    "mdsfair-generate": (
        ("--path PATH", "path(s) to model file(s), colon separated"),
        ("--gen-subset GEN_SUBSET", "data subset to generate (train, valid, test) (default: test)"),
        ("--beam BEAM", "beam size (default: 5)"),
        ("--nbest NBEST", "number of hypotheses to output (default: 1)"),
        ("--lenpen LENPEN", "length penalty: <1.0 favors shorter, >1.0 favors longer sentences (default: 1)"),
        (
            "--max-len-a MAX_LEN_A",
            "generate sequences of maximum length ax + b, where x is the source length (default: 0)",
        ),
        (
            "--max-len-b MAX_LEN_B",
            "generate sequences of maximum length ax + b, where x is the source length (default: 200)",
        ),
        ("--min-len MIN_LEN", "minimum generation length (default: 1)"),
        (
            "--no-repeat-ngram-size NO_REPEAT_NGRAM_SIZE",
            "ngram blocking such that this size ngram cannot be repeated in the generation (default: 0)",
        ),
        ("--prefix-size PREFIX_SIZE", "initialize generation by target prefix of given length (default: 0)"),
        ("--max-tokens MAX_TOKENS", "maximum number of tokens in a batch"),
        ("--batch-size, --max-sentences BATCH_SIZE", "number of examples in a batch"),
        ("--results-path RESULTS_PATH", "path to save eval results (optional)"),
        (
            "--post-process, --remove-bpe [POST_PROCESS]",
            "post-process text by removing BPE, letter segmentation, etc. Valid options can be found in fairseq.data.utils.post_process.",
        ),
        ("--cpu", "use CPU instead of CUDA"),
        ("--fp16", "use FP16"),
    ),
}
