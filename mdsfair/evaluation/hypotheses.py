"""What ``mdsfair-rouge`` scores: the hypotheses of a plain file or a
fairseq-generate log and, per hypothesis, its references (REF files, the
log's ``T-`` lines, or the data-bin's stored summaries), checked so that
exactly the expected clusters are scored.

:func:`load_hypotheses_and_references` runs the steps in order:
:func:`read_hypotheses` (plain file or log, GPT-2 ids decoded),
:func:`count_expected_clusters` (``--expected``, the data-bin split, the REF
files: whichever is given, all must agree), the hypothesis-id check
(:func:`check_hypothesis_ids`), and :func:`pair_references`.

Pure Python (no torch / fairseq import), for ``mdsfair-rouge``.
"""

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

from mdsfair.data.manifest import MANIFEST_NAME, read_manifest
from mdsfair.evaluation.fairseq_output import Gpt2Decoder, is_generate_output, parse_generate_lines
from mdsfair.evaluation.inputs import RougeInputError, read_lines
from mdsfair.evaluation.references import data_bin_references

# Log records keep the name mdsfair-rouge's users filter on.
logger = logging.getLogger("mdsfair.evaluation.rouge")

#: The line the task logs for every split it loads (one per split).
DATA_BIN_LINE_RE = re.compile(
    r"split (?P<split>\S+) of data-bin (?P<data_bin>.+?): (?P<clusters>\d+) clusters, source tokens kept"
)


def reference_file_list(ref_paths: Optional[Union[str, Sequence[str]]]) -> List[str]:
    """The REF files as a list: one path, several, or none (``None``)."""
    return [ref_paths] if isinstance(ref_paths, str) else list(ref_paths or [])


def data_bin_named_in_log(lines: Sequence[str]) -> Optional[Tuple[str, str]]:
    """``(data_bin, split)`` of the last split the task logged in ``lines``."""
    found = None
    for line in lines:
        match = DATA_BIN_LINE_RE.search(line)
        if match:
            found = (match.group("data_bin"), match.group("split"))
    return found


def same_data_bin(first: str, second: str) -> bool:
    """True if two data-bin paths name one folder (the same folder when both
    exist here, else the same normalised path)."""
    if os.path.isdir(first) and os.path.isdir(second):
        return os.path.samefile(first, second)
    return os.path.normpath(os.path.abspath(first)) == os.path.normpath(os.path.abspath(second))


def check_log_data_bin(hyp_path: str, named: Tuple[str, str], data_bin: Optional[str], split: Optional[str]) -> None:
    """Refuse an explicit ``--data-bin`` / ``--split`` other than the ones the
    fairseq-generate log ``hyp_path`` names (``named``: ``(data_bin, split)``):
    its references and cluster count would be another data set's."""
    logged_bin, logged_split = named
    where = "" if os.path.isdir(logged_bin) else " (a path that does not exist here)"
    if data_bin is not None and not same_data_bin(data_bin, logged_bin):
        raise RougeInputError(
            f"{hyp_path} was generated from data-bin {logged_bin}{where} (split {logged_split!r}), but --data-bin "
            f"is {data_bin}: its references and cluster count are another data-bin's; drop --data-bin, or pass "
            "--ignore-log-data-bin to score against it anyway"
        )
    if split is not None and split != logged_split:
        raise RougeInputError(
            f"{hyp_path} was generated from split {logged_split!r} of {logged_bin}, but --split is {split!r}: "
            "its references are another split's; drop --split, or pass --ignore-log-data-bin to score against it "
            "anyway"
        )


def check_hypothesis_ids(ids: Optional[Sequence[int]], count: int, expected: int, hyp_path: str, why: str) -> None:
    """Refuse hypotheses that do not cover clusters ``0 .. expected - 1``
    exactly (``ids``: the generate log's ids; None for a plain file of
    ``count`` lines). ``why`` says where ``expected`` comes from."""
    if ids is None:
        if count != expected:
            raise RougeInputError(f"{hyp_path} has {count} hypotheses but {why}")
        return
    present = set(ids)
    missing = [i for i in range(expected) if i not in present]
    extra = sorted(i for i in present if i >= expected)
    problems = []
    if missing:
        shown = ", ".join(map(str, missing[:20])) + (", ..." if len(missing) > 20 else "")
        problems.append(f"no hypothesis for {len(missing)} of {expected} clusters (ids {shown})")
    if extra:
        shown = ", ".join(map(str, extra[:20])) + (", ..." if len(extra) > 20 else "")
        problems.append(f"{len(extra)} ids beyond the {expected} clusters ({shown})")
    if problems:
        raise RougeInputError(
            f"{hyp_path}: {'; '.join(problems)} ({why}). The log is incomplete (generation stopped early or "
            "skipped clusters, e.g. --skip-invalid-size-inputs-valid-test) or belongs to another split; "
            "scoring part of a test set would give a number that is not the test set's"
        )


def data_bin_gpt2_files(data_bin: str) -> Tuple[Optional[str], Optional[str]]:
    """``(encoder.json, vocab.bpe)`` of a data-bin preprocessed with
    ``--subword gpt2`` (its manifest's ``subword`` entry names the copies
    mdsfair-preprocess made), else ``(None, None)``."""
    manifest_path = os.path.join(data_bin, MANIFEST_NAME)
    if not os.path.isfile(manifest_path):
        return None, None
    subword = read_manifest(data_bin).get("subword", {})
    if subword.get("type") != "gpt2" or "encoder_json" not in subword or "vocab_bpe" not in subword:
        return None, None
    paths = tuple(os.path.join(data_bin, subword[key]) for key in ("encoder_json", "vocab_bpe"))
    missing = [path for path in paths if not os.path.isfile(path)]
    if missing:
        raise RougeInputError(f"{manifest_path} names GPT-2 files that are missing: {', '.join(missing)}")
    return paths


@dataclass
class Hypotheses:
    """HYP as read: texts, and for a fairseq-generate log the ids and ``T-`` lines."""

    texts: List[str]
    ids: Optional[List[int]] = None
    targets: Optional[List[Optional[str]]] = None
    data_bin: Optional[str] = None  # the data-bin given, else the one the log names
    split: Optional[str] = None


@dataclass
class ExpectedClusters:
    """How many clusters HYP must cover, why, and what was read to know it."""

    count: Optional[int]
    why: Optional[str]
    stored_references: Optional[List[List[str]]] = None  # the data-bin's, when a data-bin was read
    stored_path: Optional[str] = None
    reference_columns: List[List[str]] = field(default_factory=list)  # one per REF file


def read_hypotheses(
    hyp_path: str,
    ref_paths: Sequence[str],
    gpt2_encoder_json: Optional[str],
    gpt2_vocab_bpe: Optional[str],
    data_bin: Optional[str],
    split: Optional[str],
    target_lines: bool,
    info: Dict,
    ignore_log_data_bin: bool = False,
) -> Hypotheses:
    """Step 1: the hypotheses of a plain file or a fairseq-generate log (its
    data-bin and split taken from the log when no reference source is given;
    an explicit ``data_bin`` / ``split`` other than the log's refused unless
    ``ignore_log_data_bin``; GPT-2 ids decoded with the given files or the
    data-bin's, refused when they cannot be). ``info`` receives the data-bin
    and split the hypotheses are of (``data_bin``, ``split``; ``None`` when
    unknown) and the ones the log names (``log_data_bin``)."""
    lines = read_lines(hyp_path)
    if not lines:
        raise RougeInputError(f"hypothesis file {hyp_path} is empty (0 lines)")
    if not is_generate_output(lines):
        if target_lines:
            raise RougeInputError(f"{hyp_path} is not fairseq-generate output, so it has no T- lines")
        if not ref_paths and data_bin is None:
            raise RougeInputError(
                f"{hyp_path} is not fairseq-generate output, so a REF file is required (or --data-bin DIR "
                "--split S: the references stored in a data-bin)"
            )
        info.update(data_bin=data_bin, split=split if data_bin is None else split or "test", log_data_bin=None)
        return Hypotheses(lines, data_bin=data_bin, split=split)
    if (gpt2_encoder_json is None) != (gpt2_vocab_bpe is None):
        raise RougeInputError("GPT-2 decoding needs both --gpt2-encoder-json and --gpt2-vocab-bpe")
    named = data_bin_named_in_log(lines)
    if named is not None and data_bin is not None:
        if not ignore_log_data_bin:
            check_log_data_bin(hyp_path, named, data_bin, split)
        split = split or named[1]
    if data_bin is None and not ref_paths and not target_lines:
        if named is None:
            raise RougeInputError(
                f"{hyp_path} does not name its data-bin (the task's line 'split S of data-bin D: N clusters' "
                "is missing, e.g. logging was off): give --data-bin DIR --split S (references: the data-bin's "
                "stored summaries), REF files, or --target-lines to score against the log's T- lines, which "
                "are cut at the model's target limit"
            )
        data_bin, logged_split = named
        split = split or logged_split
    if gpt2_encoder_json is None and data_bin is not None:
        gpt2_encoder_json, gpt2_vocab_bpe = data_bin_gpt2_files(data_bin)
        if gpt2_encoder_json is not None:
            info["gpt2_files"] = "the data-bin's " + ", ".join((gpt2_encoder_json, gpt2_vocab_bpe))
    decoder = Gpt2Decoder(gpt2_encoder_json, gpt2_vocab_bpe) if gpt2_encoder_json else None
    ids, hypotheses, targets = parse_generate_lines(lines, decoder, source=hyp_path)
    if decoder is None:
        non_empty = [text for text in hypotheses if text.strip()]
        if non_empty and all(Gpt2Decoder.looks_encoded(text) for text in non_empty):
            raise RougeInputError(
                f"{hyp_path}: every hypothesis is a sequence of integers (GPT-2 BPE ids: fairseq-generate ran "
                "without --bpe gpt2), which would score 0: give --data-bin of a GPT-2 data-bin (its encoder.json "
                "and vocab.bpe decode them) or --gpt2-encoder-json and --gpt2-vocab-bpe"
            )
    logger.info("read %d hypotheses (ids %d..%d) from fairseq-generate output %s", len(ids), ids[0], ids[-1], hyp_path)
    info.update(
        data_bin=data_bin if data_bin is not None else (named[0] if named else None),
        split=(split or "test") if data_bin is not None else (named[1] if named else split),
        log_data_bin=list(named) if named else None,
    )
    return Hypotheses(hypotheses, ids, targets, data_bin, split)


def count_expected_clusters(
    hyp_path: str,
    ref_paths: Sequence[str],
    data_bin: Optional[str],
    split: Optional[str],
    expected: Optional[int],
) -> ExpectedClusters:
    """Step 2: the number of clusters to score, from ``--expected``, the
    data-bin split (whose stored references are kept) and the REF files
    (whose lines are kept), refusing any two that disagree."""
    result = ExpectedClusters(expected, f"--expected is {expected}" if expected is not None else None)
    if data_bin is not None:
        stored, path = data_bin_references(data_bin, split or "test")
        if result.count is not None and result.count != len(stored):
            raise RougeInputError(f"--expected {result.count} but {path} has {len(stored)} clusters")
        result.count = len(stored)
        result.why = f"data-bin {data_bin} split {split or 'test'!r} has {len(stored)} clusters"
        result.stored_references, result.stored_path = stored, path
    for path in ref_paths:
        column = read_lines(path)
        if result.count is not None and len(column) != result.count:
            raise RougeInputError(f"{path} has {len(column)} lines but {result.why}")
        result.count, result.why = len(column), result.why or f"{path} has {len(column)} lines"
        result.reference_columns.append(column)
    if result.count is None:
        raise RougeInputError(
            f"mdsfair-rouge cannot tell how many clusters {hyp_path} should cover: give --expected N or "
            "--data-bin DIR --split S"
        )
    return result


def pair_references(
    hyp_path: str,
    hypotheses: Hypotheses,
    expected: ExpectedClusters,
    ref_paths: Sequence[str],
    target_lines: bool,
    info: Dict,
) -> List[List[str]]:
    """Step 4: per hypothesis its non-empty references: the log's ``T-``
    lines (``target_lines``), the REF files' lines, or the data-bin's stored
    summaries, in that order of preference."""
    if target_lines:
        missing = [sample_id for sample_id, target in zip(hypotheses.ids, hypotheses.targets) if target is None]
        if missing:
            raise RougeInputError(
                f"{hyp_path}: {len(missing)} of {len(hypotheses.ids)} ids have no T- line (first: id {missing[0]})"
            )
        logger.warning(
            "%s: scoring against the T- lines, the targets as the task served them (cut at the model's "
            "target limit); the full references are the data-bin's <split>.summary.txt",
            hyp_path,
        )
        info["references"] = "T- lines of " + hyp_path
        return [[target] for target in hypotheses.targets]
    if ref_paths:
        info["references"] = list(ref_paths)
        references = []
        for index in range(len(hypotheses.texts)):
            cluster = [column[index] for column in expected.reference_columns if column[index].strip()]
            if not cluster:
                raise RougeInputError(
                    f"{', '.join(f'{path}:{index + 1}' for path in ref_paths)}: empty reference "
                    f"(every hypothesis needs at least one non-empty reference)"
                )
            references.append(cluster)
        return references
    info["references"] = expected.stored_path
    return expected.stored_references


def load_hypotheses_and_references(
    hyp_path: str,
    ref_paths: Optional[Union[str, Sequence[str]]] = None,
    gpt2_encoder_json: Optional[str] = None,
    gpt2_vocab_bpe: Optional[str] = None,
    data_bin: Optional[str] = None,
    split: Optional[str] = None,
    expected: Optional[int] = None,
    target_lines: bool = False,
    info: Optional[Dict] = None,
    ignore_log_data_bin: bool = False,
) -> Tuple[List[str], List[List[str]]]:
    """Read HYP (plain or fairseq-generate log) and its references.

    References, in this order: the REF files; with ``target_lines``, the
    log's ``T-`` lines; otherwise the data-bin's stored summaries (``data_bin``
    / ``split``, or the data-bin and split the log names). The number of
    clusters expected is ``expected``, else the data-bin split's, else the
    REF files' line count; hypotheses must cover exactly those clusters.
    A ``data_bin`` or ``split`` other than the one a log names is refused
    unless ``ignore_log_data_bin``; a log that holds a cluster twice is
    refused. GPT-2 BPE ids in a log are decoded with the given files, else
    with the data-bin's own (a ``--subword gpt2`` data-bin); ids that cannot
    be decoded are refused, not scored as 0.

    Returns:
        ``(hypotheses, references)``: strings, and per hypothesis the list of
        its non-empty references. ``info`` (a dict), when given, receives
        where the references came from.
    """
    ref_paths = reference_file_list(ref_paths)
    info = info if info is not None else {}
    if ref_paths and target_lines:
        raise RougeInputError("give REF files or --target-lines, not both")
    if expected is not None and expected < 1:
        raise RougeInputError(f"--expected must be positive, got {expected}")
    hypotheses = read_hypotheses(
        hyp_path, ref_paths, gpt2_encoder_json, gpt2_vocab_bpe, data_bin, split, target_lines, info, ignore_log_data_bin
    )
    clusters = count_expected_clusters(hyp_path, ref_paths, hypotheses.data_bin, hypotheses.split, expected)
    check_hypothesis_ids(hypotheses.ids, len(hypotheses.texts), clusters.count, hyp_path, clusters.why)
    return hypotheses.texts, pair_references(hyp_path, hypotheses, clusters, ref_paths, target_lines, info)
