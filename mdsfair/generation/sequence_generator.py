"""The sequence generator mdsfair's tasks build: the static-shape one
(:mod:`mdsfair.generation.static_decoding`) wherever it gives fairseq's
beams, else fairseq's (:func:`choose_generator`), with a working n-gram
blocker.

``MultiDocSummarizationTask.build_generator`` (and so ``fairseq-generate``,
the hub's ``generate()`` / ``summarize()``, ``mdsfair-attention-analysis`` and
``mdsfair-page-importance``) calls :func:`build_sequence_generator`: fairseq's
own construction (beam search, sampling, diverse beams, constraints,
``--print-alignment`` ... all as in ``FairseqTask.build_generator``), then
:func:`use_vectorized_ngram_blocker` swaps fairseq's ``NGramRepeatBlock``,
which in the pinned fairseq blocks nothing (see
:mod:`mdsfair.generation.ngram_blocking`), for
:class:`~mdsfair.generation.ngram_blocking.VectorizedNGramRepeatBlock`. The
swap is by attribute, so it works for every model family and for any
``SequenceGenerator`` subclass passed as ``seq_gen_cls``.

It also arranges the end-of-generation report of models that count what
their input lost on the way (PageSum's page cuts,
:func:`report_page_totals_when_done`): one log line when the generator is
released, i.e. when ``fairseq-generate`` or the hub's ``generate()`` is done
with it, from counters kept on the device (no host synchronization per step).
"""

import logging
import weakref

from fairseq.ngram_repeat_block import NGramRepeatBlock
from fairseq.tasks import FairseqTask

from mdsfair.generation.length_penalty import (
    LENGTH_PENALTY_FORMS,
    LENGTH_PENALTY_OPTION,
    LengthPenaltySequenceGenerator,
)
from mdsfair.generation.ngram_blocking import VectorizedNGramRepeatBlock
from mdsfair.generation.settings_checks import search_flags_refusal

logger = logging.getLogger(__name__)


def use_vectorized_ngram_blocker(generator):
    """Replace ``generator.repeat_ngram_blocker`` (fairseq's
    ``NGramRepeatBlock``) by a :class:`VectorizedNGramRepeatBlock` of the same
    n, in place; returns ``generator``. Generators without n-gram blocking
    (``--no-repeat-ngram-size 0``, ``SequenceScorer`` for
    ``--score-reference``) and generators already converted are returned
    unchanged."""
    blocker = getattr(generator, "repeat_ngram_blocker", None)
    if blocker is None or isinstance(blocker, VectorizedNGramRepeatBlock):
        return generator
    if not isinstance(blocker, NGramRepeatBlock):
        raise TypeError(
            f"{type(generator).__name__}.repeat_ngram_blocker is a {type(blocker).__name__}, not fairseq's "
            "NGramRepeatBlock; mdsfair replaces only fairseq's blocker"
        )
    generator.repeat_ngram_blocker = VectorizedNGramRepeatBlock(blocker.no_repeat_ngram_size)
    return use_vectorized_ngram_blocker(generator)


class GenerationSettingsError(ValueError):
    """Beam-search settings that cannot produce a summary."""


def check_generation_settings(
    beam, min_len, max_len_a, max_len_b, sampling=False, nbest=None, match_source_len=False
) -> None:
    """Refuse settings fairseq would fail on later, or blame on the wrong
    flag: a beam below 1, and a length limit that allows no token or is
    below ``--min-len`` (with ``--max-len-a 0`` the limit is ``--max-len-b``;
    fairseq's own assertion names only min_len); and the search flags of
    :func:`~mdsfair.generation.settings_checks.search_flags_refusal`
    (``--sampling`` without ``--nbest`` = ``--beam``, ``--match-source-len``)."""
    refusal = search_flags_refusal(sampling, beam, nbest, match_source_len)
    if refusal is not None:
        raise GenerationSettingsError(refusal)
    if beam is not None and int(beam) < 1:
        raise GenerationSettingsError(f"--beam (beam=) must be at least 1, got {beam}")
    if min_len is not None and int(min_len) < 0:
        raise GenerationSettingsError(f"--min-len (min_len=) must be at least 0, got {min_len}")
    if max_len_a is not None and float(max_len_a) < 0:
        raise GenerationSettingsError(f"--max-len-a (max_len_a=) must be at least 0, got {max_len_a}")
    if max_len_a is not None and float(max_len_a) == 0 and max_len_b is not None:
        if int(max_len_b) < 1:
            raise GenerationSettingsError(
                f"--max-len-b {max_len_b} with --max-len-a 0 allows no output token: "
                "give --max-len-b of at least 1 (the summary length limit in tokens)"
            )
        if min_len is not None and int(min_len) > int(max_len_b):
            raise GenerationSettingsError(
                f"--min-len {min_len} is above the length limit --max-len-b {max_len_b} (with --max-len-a 0): "
                "raise --max-len-b or lower --min-len"
            )


def build_sequence_generator(
    task,
    models,
    generation_cfg,
    seq_gen_cls=None,
    extra_gen_cls_kwargs=None,
    prefix_allowed_tokens_fn=None,
):
    """fairseq's generator for ``task`` (``FairseqTask.build_generator`` with
    the same arguments) with the vectorized n-gram blocker; settings that
    cannot work are refused first (:func:`check_generation_settings`)."""
    check_generation_settings(
        getattr(generation_cfg, "beam", None),
        getattr(generation_cfg, "min_len", None),
        getattr(generation_cfg, "max_len_a", None),
        getattr(generation_cfg, "max_len_b", None),
        match_source_len=getattr(generation_cfg, "match_source_len", False),
    )
    generator = FairseqTask.build_generator(
        task,
        models,
        generation_cfg,
        seq_gen_cls=seq_gen_cls,
        extra_gen_cls_kwargs=extra_gen_cls_kwargs,
        prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
    )
    report_page_totals_when_done(generator, models)
    return use_vectorized_ngram_blocker(generator)


def report_page_totals_when_done(generator, models) -> None:
    """Once ``generator`` is released (``fairseq-generate``'s main returns,
    the hub's ``generate()`` ends) or, at the latest, when the process exits,
    log what building the pages dropped, merged or cut over the examples
    encoded meanwhile: one line per model whose encoder counts pages
    (``page_totals()`` / ``log_page_totals(since)``, PageSum's
    :class:`~mdsfair.models.pagesum_bart.PageSumEncoder`), a warning when
    anything was lost. One host synchronization, at the end."""
    encoders = [getattr(model, "encoder", None) for model in models]
    snapshots = [
        (encoder, encoder.page_totals()) for encoder in encoders if callable(getattr(encoder, "page_totals", None))
    ]
    if snapshots:
        # kept on the generator (a weak reference to it: no cycle), so a caller that knows when
        # generation ends (the hub's generate()) reports then, not when the garbage collector runs
        generator.report_page_totals = weakref.finalize(generator, log_page_totals_since, snapshots)


def log_page_totals_since(snapshots) -> None:
    """Log each encoder's page totals since its snapshot ``(encoder, page_totals())``."""
    for encoder, since in snapshots:
        encoder.log_page_totals(since)


def static_decoding_generator(generation_cfg, seq_gen_cls, extra_gen_cls_kwargs, bucket_sizes: str):
    """``(seq_gen_cls, extra_gen_cls_kwargs)`` for ``--static-decoding``:
    :class:`~mdsfair.generation.static_decoding.StaticShapeSequenceGenerator`
    with the parsed ``--static-decoding-buckets``. Settings it cannot run
    are refused: another generator class (``--print-alignment`` asks for
    fairseq's aligning one) and lexical constraints."""
    from mdsfair.generation.static_decoding import StaticShapeSequenceGenerator, parse_bucket_sizes

    if seq_gen_cls is not None and seq_gen_cls is not StaticShapeSequenceGenerator:
        raise GenerationSettingsError(
            f"--static-decoding replaces fairseq's generator, but {seq_gen_cls.__name__} was asked for "
            "(e.g. by --print-alignment); generate without --static-decoding"
        )
    for flag, name in (("--print-alignment", "print_alignment"), ("--constraints", "constraints")):
        if getattr(generation_cfg, name, None):
            raise GenerationSettingsError(f"--static-decoding does not support {flag}; generate without it")
    kwargs = dict(extra_gen_cls_kwargs or {})
    try:
        kwargs["bucket_sizes"] = parse_bucket_sizes(bucket_sizes)
    except ValueError as error:
        raise GenerationSettingsError(str(error)) from None
    return StaticShapeSequenceGenerator, kwargs


def fairseq_generator_reason(
    generation_cfg, seq_gen_cls=None, extra_gen_cls_kwargs=None, prefix_allowed_tokens_fn=None
):
    """Why these settings need fairseq's generator rather than the
    static-shape one (:mod:`mdsfair.generation.static_decoding`), or None
    where the static one gives fairseq's beams: it covers beam search with
    n-gram blocking, prefix tokens, length limits and penalties, and
    diverse siblings (``--diversity-rate``; ``tests/test_static_decoding.py``);
    sampling draws other random numbers for its fixed rows, diverse beam
    groups index their overlaps by fairseq's shrinking batch, and the rest
    is fairseq's own machinery."""
    from mdsfair.generation.static_decoding import StaticShapeSequenceGenerator

    if seq_gen_cls is not None and seq_gen_cls is not StaticShapeSequenceGenerator:
        return f"{seq_gen_cls.__name__} was asked for"
    for flag, name, reason in (
        ("--score-reference", "score_reference", "scores the reference instead of generating"),
        ("--print-alignment", "print_alignment", "keeps every hypothesis's alignment"),
        ("--constraints", "constraints", "resizes the search per source"),
        ("--sampling", "sampling", "draws its random numbers per row of fairseq's shrinking batch"),
    ):
        if getattr(generation_cfg, name, None):
            return f"{flag} ({reason})"
    if (getattr(generation_cfg, "diverse_beam_groups", -1) or -1) > 0:
        return "--diverse-beam-groups (its per-source group overlaps follow fairseq's shrinking batch)"
    if prefix_allowed_tokens_fn is not None or getattr(generation_cfg, "prefix_allowed_tokens_fn", None):
        return "a prefix_allowed_tokens_fn (a constrained search not checked here)"
    if (extra_gen_cls_kwargs or {}).get("lm_model") is not None:
        return "a language model fused into the search (--lm-path, not checked here)"
    return None


def generator_with_length_penalty_form(generation_cfg, seq_gen_cls, extra_gen_cls_kwargs, form: str):
    """``(seq_gen_cls, extra_gen_cls_kwargs)`` that score finished hypotheses
    with the length penalty ``form`` (``--length-penalty-form``,
    :mod:`mdsfair.generation.length_penalty`). fairseq's form is what every
    fairseq generator does: the pair is returned as it is. Another form needs
    a :class:`~mdsfair.generation.length_penalty.LengthPenaltySequenceGenerator`
    (the static-shape generator is one; fairseq's plain generator becomes
    one); ``--score-reference`` scores the reference without a search and
    keeps fairseq's scorer; a generator of another class (``--print-alignment``'s
    aligning one, or a caller's) is refused with the reason."""
    if form not in LENGTH_PENALTY_FORMS:
        raise GenerationSettingsError(
            f"--length-penalty-form ({LENGTH_PENALTY_OPTION}=) must be one of {', '.join(LENGTH_PENALTY_FORMS)}, "
            f"got {form!r}"
        )
    if form == LENGTH_PENALTY_FORMS[0] or getattr(generation_cfg, "score_reference", False):
        return seq_gen_cls, extra_gen_cls_kwargs
    if seq_gen_cls is None and getattr(generation_cfg, "print_alignment", None):
        raise GenerationSettingsError(
            f"--length-penalty-form {form} is not available with --print-alignment (fairseq's aligning generator "
            "divides by len ** --lenpen); generate without one of them"
        )
    if seq_gen_cls is None:
        seq_gen_cls = LengthPenaltySequenceGenerator
    elif not issubclass(seq_gen_cls, LengthPenaltySequenceGenerator):
        raise GenerationSettingsError(
            f"--length-penalty-form {form} needs a generator derived from LengthPenaltySequenceGenerator, "
            f"but {seq_gen_cls.__name__} was asked for; generate with --length-penalty-form fairseq"
        )
    kwargs = dict(extra_gen_cls_kwargs or {})
    kwargs["length_penalty_form"] = form
    return seq_gen_cls, kwargs


def choose_generator(
    generation_cfg,
    seq_gen_cls,
    extra_gen_cls_kwargs,
    prefix_allowed_tokens_fn,
    *,
    static_decoding: bool,
    fairseq_generator: bool,
    bucket_sizes: str,
    length_penalty_form: str = LENGTH_PENALTY_FORMS[0],
):
    """``(seq_gen_cls, extra_gen_cls_kwargs)`` of the generator the task
    builds. The static-shape generator by default, wherever it gives
    fairseq's beams; fairseq's for what it does not cover
    (:func:`fairseq_generator_reason`, with one INFO line saying why) and
    with ``--fairseq-generator``. ``--static-decoding`` insists on the
    static one: settings it does not cover are refused with the reason.
    Either scores its finished hypotheses with the length penalty of the
    generation config's ``length_penalty_form`` (``--eval-rouge-args``, the
    hub's ``generate()``) if it has one, else ``length_penalty_form`` (the
    task's ``--length-penalty-form``): :func:`generator_with_length_penalty_form`."""
    form = getattr(generation_cfg, LENGTH_PENALTY_OPTION, None) or length_penalty_form
    if fairseq_generator:
        if static_decoding:
            raise GenerationSettingsError(
                "--static-decoding and --fairseq-generator ask for two different generators; give one of them"
            )
        chosen = seq_gen_cls, extra_gen_cls_kwargs
    elif static_decoding:
        chosen = static_decoding_generator(generation_cfg, seq_gen_cls, extra_gen_cls_kwargs, bucket_sizes)
    else:
        reason = fairseq_generator_reason(generation_cfg, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
        if reason is not None:
            logger.info("generating with fairseq's generator, not the static-shape one: %s", reason)
            chosen = seq_gen_cls, extra_gen_cls_kwargs
        else:
            chosen = static_decoding_generator(generation_cfg, seq_gen_cls, extra_gen_cls_kwargs, bucket_sizes)
    return generator_with_length_penalty_form(generation_cfg, *chosen, form)
