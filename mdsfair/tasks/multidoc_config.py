"""The configuration of task ``multidoc_summarization``
(:class:`~mdsfair.tasks.multidoc_summarization.MultiDocSummarizationTask`):
its data-bin, the truncation policies of its dataset, the checkpoint
provenance options, its generators and ``--eval-rouge``; each field is a flag
with its help."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum
from omegaconf import II

from mdsfair.data.primera_layout import SOURCE_LAYOUTS
from mdsfair.generation.length_penalty import LENGTH_PENALTY_FORMS
from mdsfair.tasks.training_setup import TrainingSetupConfig


@dataclass
class MultiDocSummarizationConfig(TrainingSetupConfig):
    data: str = field(
        default="",
        metadata={
            "help": "data-bin directory written by mdsfair-preprocess (several joined by ':' are "
            "visited round-robin per epoch)"
        },
    )
    max_source_positions: int = field(
        default=1024,
        metadata={"help": "total source budget in tokens, special tokens included; longer sources are cut and counted"},
    )
    max_target_positions: int = field(
        default=1024, metadata={"help": "maximum target length in tokens (longer targets are cut and counted)"}
    )
    max_documents: Optional[int] = field(
        default=None, metadata={"help": "keep at most this many documents per cluster (counted)"}
    )
    max_paragraphs: Optional[int] = field(
        default=None,
        metadata={
            "help": "keep the first L' paragraphs in stream (ranked) order, as the Hierarchical "
            "Transformer does (counted)"
        },
    )
    max_paragraph_tokens: Optional[int] = field(
        default=None, metadata={"help": "cut every paragraph to this many tokens (counted)"}
    )
    per_document_budget: bool = field(
        default=False,
        metadata={
            "help": "every document keeps its first (M - n) // n tokens (M = --max-source-positions, "
            "n = documents), HierEncDec's per-passage limit as the authors' code computes it; "
            "the source is then cut at M as without this flag (on by default when the data-bin "
            "records PRIMERA's layout)"
        },
    )
    no_document_start_token: bool = field(
        default=False,
        metadata={
            "help": "do not start every document with <s> (the start-of-document token); by default "
            "each document starts with <s> and one </s> closes the source"
        },
    )
    source_layout: Optional[ChoiceEnum(list(SOURCE_LAYOUTS))] = field(
        default=None,
        metadata={
            "help": "how documents are joined: 'documents' starts each with <s> (see "
            "--no-document-start-token); 'primera' is PRIMERA's <s> doc_1 <doc-sep> ... doc_n "
            "<doc-sep> </s> (allenai/PRIMER script/dataloader.py), the <doc-sep> id taken from "
            "the data-bin's dictionary; with --per-document-budget every document then keeps "
            "its first M // n - 2 tokens, as the authors' code does (counted). Default: the "
            "layout the data-bin records (mdsfair-preprocess --source-layout; a recorded "
            "'primera' also brings its per-document truncation), else 'documents'; a value "
            "that contradicts the recorded one is refused"
        },
    )
    no_truncate_target: bool = field(
        default=False,
        metadata={"help": "do not cut long targets; fairseq then filters them by --max-target-positions"},
    )
    allow_dictionary_mismatch: bool = field(
        default=False,
        metadata={
            "help": "load a checkpoint trained on a data-bin whose dictionary or subword model differs "
            "from this one's (deliberate vocabulary transfer); by default such a load stops "
            "with both data-bins named"
        },
    )
    no_checkpoint_checksum: bool = field(
        default=False,
        metadata={
            "help": "do not store a SHA-256 checksum of the model weights in saved checkpoints "
            "(saves one pass over the weights per save; see mdsfair/checkpoints/checksums.py)"
        },
    )
    static_decoding: bool = field(
        default=False,
        metadata={
            "help": "insist on the static-shape beam search (mdsfair.generation.static_decoding: a fixed "
            "batch x beam shape, the encoder output expanded once; the default generator wherever it "
            "gives fairseq's beams): refuse --constraints and --print-alignment instead of handing "
            "them to fairseq's generator"
        },
    )
    fairseq_generator: bool = field(
        default=False,
        metadata={
            "help": "generate with fairseq's SequenceGenerator instead of the static-shape beam search "
            "(the default, same best beams; mdsfair.generation.static_decoding)"
        },
    )
    static_decoding_buckets: str = field(
        default="",
        metadata={
            "help": "for the static-shape generator: comma-separated batch sizes; every batch is padded to the "
            "smallest that holds it (its last source repeated, the copies' output dropped), so that "
            "batches share a few shapes; empty (default): each batch keeps its own size"
        },
    )
    length_penalty_form: ChoiceEnum(list(LENGTH_PENALTY_FORMS)) = field(
        default=LENGTH_PENALTY_FORMS[0],
        metadata={
            "help": "the length penalty lp(len) a finished hypothesis's log-probability is divided by, with "
            "--lenpen as its alpha (len: its tokens with </s>): 'fairseq' len^alpha, fairseq's; 'gnmt' "
            "((5 + len) / 6)^alpha, GNMT's (Wu et al. 2016), which the Hierarchical Transformer decodes with "
            "(alpha 0.4); either generator (mdsfair.generation.length_penalty)"
        },
    )
    min_len_words: Optional[int] = field(
        default=None,
        metadata={
            "help": "generation: no summary ends before it holds this many words (a word begins at every "
            "word-initial subword of the data-bin's subword model), as DAPE's 200 (Multi-News) / 110 "
            "(Multi-XScience); --max-len-b still bounds the tokens (mdsfair.generation.word_limits)"
        },
    )
    max_len_words: Optional[int] = field(
        default=None,
        metadata={
            "help": "generation: no summary holds more than this many words (a word may be finished, no new "
            "one begun), as DAPE's 300; --max-len-b still bounds the tokens (mdsfair.generation.word_limits)"
        },
    )
    eval_rouge: bool = field(
        default=False,
        metadata={
            "help": "in validation, generate every cluster's summary and log ROUGE-1/2/L/Lsum F1 x 100 "
            "(rouge_1, rouge_2, rouge_l, rouge_lsum; the mean over the clusters, every stored reference "
            "of the data-bin) and rouge_avg, the mean of rouge_1/2/l, so --best-checkpoint-metric "
            "rouge_avg --maximize-best-checkpoint-metric keeps the checkpoint PRIMERA's avgr keeps"
        },
    )
    eval_rouge_args: str = field(
        default='{"beam": 4, "max_len_a": 0, "max_len_b": 256, "min_len": 1, "lenpen": 1.0}',
        metadata={
            "help": "generation settings of --eval-rouge as JSON (fairseq-generate's names: beam, "
            "max_len_a, max_len_b, min_len, lenpen, no_repeat_ngram_size; and length_penalty_form)"
        },
    )
    eval_rouge_convention: str = field(
        default="mdsfair-fast",
        metadata={
            "help": "the ROUGE of --eval-rouge: mdsfair-fast (rouge-score with mdsfair's sentence "
            "splitting and stemming) or a convention scored by rouge-score (mdsfair-rouge "
            "--list-conventions); ROUGE-1.5.5's conventions average over bootstrap resamples of "
            "the whole set and are refused here"
        },
    )
    seed: int = II("common.seed")
    train_subset: str = II("dataset.train_subset")
