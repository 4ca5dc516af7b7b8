"""The text layer: sentence and paragraph splitting and word tokenization,
for every part of mdsfair (pure Python, no mdsfair import: the bottom layer,
see ARCHITECTURE.md).

* :func:`split_sentences` / :func:`split_paragraphs`: the rule-based splitter
  of scoring, the extractive baselines and the synthetic data (no model, no
  external state, so a number computed today can be reproduced later from
  the same files). The preprocessing pipeline's spaCy-based splitter
  (``preprocess/structure.py``) splits with :func:`split_sentences_rule`
  (its own rules, also here) or spaCy, and paragraphs of cleaned text with
  :func:`split_paragraphs`.
* word tokenization, one tokenizer per purpose: :func:`words` (Unicode word
  runs, lower-cased: term vectors of LexRank and the paragraph graphs),
  :func:`rouge_tokens` (rouge_score's tokenizer: lower-cased ASCII letter and
  digit runs, for ROUGE-derived labels such as the paragraph ranker's),
  :func:`has_word` (whether ROUGE can count anything in a text) and
  :func:`has_content` (whether a text holds anything but white space,
  control and format characters: what an empty document is).

Rules of :func:`split_sentences`:

* every newline is a hard sentence boundary (so text that is already one
  sentence per line stays as it is);
* ``.``, ``!`` or ``?`` (possibly repeated, possibly followed by closing quotes
  or brackets) followed by whitespace and then an upper-case letter, a digit
  or an opening quote/bracket ends a sentence;
* a stand-alone ``.``, ``!`` or ``?`` token (tokenized text such as
  ``the cat sat . the dog ran .``) ends a sentence whatever follows; this is
  also the sentence convention files2rouge uses (its ``--eos "."``);
* a period does not end a sentence after a common abbreviation
  (:data:`ABBREVIATIONS`), a single-letter initial (``J. K. Rowling``) or a
  dotted acronym (``U.S.``, ``e.g.``);
* scripts without letter case: the Chinese/Japanese full stops and marks
  ``。 ！ ？ ｡`` end a sentence with or without a space after them, as do the
  Arabic question mark ``؟`` and the Urdu full stop ``۔``, and ``.!?``
  directly followed by a Han or kana character; after ``.!?`` and whitespace,
  a letter of a caseless script (Arabic, Hebrew, Han, Devanagari, ...) starts a
  sentence as an upper-case letter does (closing quotes and brackets stay with
  the sentence they close, e.g. ``」`` and ``）``).
"""

import re
import unicodedata
from collections import Counter
from typing import Dict, List, Optional, Sequence

# Lower-cased abbreviations, without their final period, after which a period
# is not a sentence boundary.
ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof sr jr st mt ft rev hon gen sen rep gov lt col maj sgt capt
    cmdr adm pres supt det insp messrs mmes inc ltd co corp bros llc plc dept
    univ assn est fig figs eq eqs no nos vol vols pp ed eds al ca cf vs etc approx
    jan feb mar apr jun jul aug sep sept oct nov dec
    mon tue tues wed thu thur thurs fri sat sun
    ave blvd rd hwy
    """.split()
)

# A run of sentence-final punctuation, optional closing quotes/brackets and the
# whitespace after them, followed (look-ahead) by more text.
_BOUNDARY_RE = re.compile(r"""(?P<punct>[.!?]+)(?P<close>["'\u201d\u2019)\]]*)(?P<space>\s+)(?=\S)""")
_OPENING_RE = re.compile(r"""["'\u201c\u2018(\[\u300c\u300e\u3010\uff08]*""")
# Han ideographs, kana and CJK punctuation blocks: scripts written without spaces.
_HAN_KANA = "\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN_KANA_RE = re.compile("[" + _HAN_KANA + "]")


def character_kind(char: str) -> str:
    """How ROUGE tokenization treats ``char`` (lower-cased): ``ascii``
    (``[a-z0-9]``, the only characters ROUGE-1.5.5 keeps), ``han`` (a Han or
    kana character), ``word`` (a letter, mark or digit of another non-Latin
    script) or ``""`` (a separator; accented Latin letters included, as the
    official script deletes them)."""
    if ("a" <= char <= "z") or ("0" <= char <= "9"):
        return "ascii"
    if _HAN_KANA_RE.match(char):
        return "han"
    if unicodedata.category(char)[0] in "LMN" and not unicodedata.name(char, "").startswith("LATIN"):
        return "word"
    return ""


def non_latin_share(text: str) -> float:
    """The share of ``text``'s letters and digits that belong to non-Latin
    scripts (``han`` or ``word`` above): characters ROUGE-1.5.5 deletes."""
    kinds = [character_kind(char) for char in text.lower() if char.isalnum()]
    if not kinds:
        return 0.0
    return sum(kind in ("han", "word") for kind in kinds) / len(kinds)


def mostly_non_latin(texts: Sequence[str], threshold: float = 0.5) -> List[int]:
    """Indices of the texts more than ``threshold`` of whose letters and
    digits ROUGE-1.5.5 would delete (Chinese, Arabic, Russian, ...)."""
    return [index for index, text in enumerate(texts) if non_latin_share(text) > threshold]


# Sentence-final marks of caseless scripts, with the closing quotes/brackets
# after them: the sentence ends after the whole run, space or no space.
_CASELESS_END_RE = re.compile(
    "(?:[\u3002\uff01\uff1f\uff61\u061f\u06d4]+|[.!?]+(?=[" + _HAN_KANA + "]))"
    "[\"'\u201d\u2019)\\]\u300d\u300f\u3011\uff09]*"
)
_DOTTED_ACRONYM_RE = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")
_SINGLE_INITIAL_RE = re.compile(r"[A-Za-z]")


def starts_sentence(text: str, position: int) -> bool:
    """Whether the character at ``position`` can begin a sentence after a
    ``.!?`` and whitespace: an upper-case letter, a digit, or a letter of a
    script without case (which has no upper-case letter to look for)."""
    if position >= len(text):
        return False
    char = text[position]
    if char.isupper() or char.isdigit():
        return True
    return char.isalpha() and not char.islower() and char.lower() == char.upper()


def split_at_caseless_sentence_ends(text: str) -> List[str]:
    """Cut ``text`` after every sentence-final mark of a caseless script
    (``。！？｡`` and ``؟ ۔``, with closing quotes/brackets after them, and
    ``.!?`` directly before a Han or kana character). Pieces are stripped;
    empty ones dropped; text without such marks comes back whole."""
    pieces, begin = [], 0
    for match in _CASELESS_END_RE.finditer(text):
        pieces.append(text[begin : match.end()].strip())
        begin = match.end()
    pieces.append(text[begin:].strip())
    return [piece for piece in pieces if piece]


def _is_boundary(text: str, match: "re.Match") -> bool:
    """Decide whether the punctuation run in ``match`` ends a sentence."""
    start = match.start("punct")
    standalone = start == 0 or text[start - 1].isspace()
    if standalone and not match.group("close"):
        # Tokenized text: " . " ends a sentence whatever comes next.
        return True
    if not starts_sentence(text, _OPENING_RE.match(text, match.end()).end()):
        return False
    punct = match.group("punct")
    if punct != ".":
        # "!", "?", "...", "?!" before a capital: a boundary.
        return True
    preceding = text[:start].rsplit(None, 1)
    word = preceding[-1] if preceding else ""
    word = word.lstrip("\"'\u201c\u2018([")
    if not word:
        return True
    if word.lower() in ABBREVIATIONS:
        return False
    if _SINGLE_INITIAL_RE.fullmatch(word) or _DOTTED_ACRONYM_RE.fullmatch(word):
        return False
    return True


def _split_line(line: str) -> List[str]:
    """Split one line (no newlines) into sentences with the rules above."""
    return [sentence for piece in split_at_caseless_sentence_ends(line) for sentence in _split_cased(piece)]


def _split_cased(line: str) -> List[str]:
    """The ``.!?`` + whitespace rules on a line without caseless-script ends."""
    sentences = []
    begin = 0
    for match in _BOUNDARY_RE.finditer(line):
        if _is_boundary(line, match):
            end = match.end("close")
            sentence = line[begin:end].strip()
            if sentence:
                sentences.append(sentence)
            begin = match.end("space")
    rest = line[begin:].strip()
    if rest:
        sentences.append(rest)
    return sentences


def split_sentences(text: str, separator: Optional[str] = None) -> List[str]:
    """Split ``text`` into sentences for scoring.

    Args:
        text: one summary (or one paragraph); newlines are hard boundaries.
        separator: when given, split on this explicit marker only (for
            example ``"<q>"`` or ``"</s>"``) instead of using the rules; the
            marker itself is removed, since ROUGE would otherwise count its
            letters as a word.

    Returns:
        The non-empty, whitespace-stripped sentences in order.
    """
    if separator:
        pieces = []
        for line in text.split("\n"):
            pieces.extend(line.split(separator))
        return [" ".join(piece.split()) for piece in pieces if piece.strip()]
    sentences = []
    for line in text.split("\n"):
        if line.strip():
            sentences.extend(_split_line(line))
    return sentences


#: What separates two paragraphs of a raw-contract document (the converters
#: write exactly this; the raw contract, :mod:`mdsfair.raw_contract`).
PARAGRAPH_SEPARATOR = "\n\n"

#: A paragraph break: a blank line, i.e. two newlines with nothing but
#: whitespace (any Unicode whitespace: no-break spaces, U+2028, ...) between
#: them, and the whitespace after it.
PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")


def split_paragraphs(document: str) -> List[str]:
    """Split a raw-contract document into paragraphs at blank lines
    (:data:`PARAGRAPH_BREAK`; ``\\r\\n`` counts as ``\\n``). Inside a paragraph
    every run of whitespace, single newlines included, becomes one space;
    empty paragraphs are dropped.

    The one paragraph splitter: ``mdsfair-preprocess`` (on cleaned text),
    ``mdsfair-convert`` (:func:`mdsfair.preprocess.converters.common.normalize_document`),
    and the extractive baselines.
    """
    paragraphs = (" ".join(part.split()) for part in PARAGRAPH_BREAK.split(document.replace("\r\n", "\n")))
    return [paragraph for paragraph in paragraphs if paragraph]


# ---------------------------------------------------------------------------
# The preprocessing pipeline's rule-based sentence splitter (mdsfair-preprocess
# --sentence-splitter rule; the hub re-splits raw text with it): its own
# abbreviation list and boundary rule, kept byte for byte so data-bins do not
# change (tests/test_preprocess.py checks their digests).

PREPROCESSING_ABBREVIATIONS = {
    "mr",
    "mrs",
    "ms",
    "dr",
    "prof",
    "sr",
    "jr",
    "st",
    "mt",
    "vs",
    "etc",
    "inc",
    "ltd",
    "co",
    "corp",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
    "no",
    "fig",
    "figs",
    "eq",
    "eqs",
    "al",
    "e.g",
    "i.e",
    "cf",
    "approx",
    "dept",
    "gen",
    "gov",
    "sen",
    "rep",
    "u.s",
    "u.k",
}
# A candidate boundary: sentence-final punctuation, optional closing quotes or
# brackets, whitespace, then something that can start a sentence.
# The next letter may also be a non-ASCII one (group "caseless", checked below
# to be upper-case, as Cyrillic or accented Latin capitals, or of a script
# without case: Arabic, Hebrew, Han, Devanagari, ...).
_PREPROCESSING_BOUNDARY = re.compile(
    r"([.!?]+[\"'\u201d\u2019)\]]*)\s+"
    r"(?=[\"'\u201c\u2018(\[\u300c\u300e\uff08]?(?:[A-Z0-9]|(?P<caseless>[^\W\d_a-zA-Z])))"
)


def split_sentences_rule(paragraph: str) -> List[str]:
    """Rule-based sentence splitter: splits after ``.!?`` followed by a space
    and an upper-case letter, digit, opening quote or a letter of a
    script without case, except after common abbreviations and single
    initials ("J. Smith"); and after the sentence-final marks of caseless
    scripts, space or no space (``。！？｡`` and ``؟ ۔``; the rules of
    :func:`mdsfair.text.split_at_caseless_sentence_ends`)."""
    if paragraph.isascii():
        return _split_sentences_cased(paragraph)
    return [
        sentence for piece in split_at_caseless_sentence_ends(paragraph) for sentence in _split_sentences_cased(piece)
    ]


def _split_sentences_cased(paragraph: str) -> List[str]:
    """The ``.!?`` + whitespace rules of :func:`split_sentences_rule`."""
    sentences, start = [], 0
    for match in _PREPROCESSING_BOUNDARY.finditer(paragraph):
        caseless = match.group("caseless")
        if caseless is not None and not (caseless.isupper() or caseless.lower() == caseless.upper()):
            continue  # a lower-case letter: not a boundary
        end = match.end(1)
        words_before = paragraph[start : match.start(1)].rsplit(None, 1)
        last_word = words_before[-1] if words_before else ""
        token = last_word.lower().strip("\"'([")
        if match.group(1).startswith(".") and (
            token in PREPROCESSING_ABBREVIATIONS or (len(token) == 1 and token.isalpha())
        ):
            continue
        sentence = paragraph[start:end].strip()
        if sentence:
            sentences.append(sentence)
        start = match.end()
    tail = paragraph[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


# ---------------------------------------------------------------------------
# Word tokenization

#: A word for term vectors: a run of Unicode letters, digits or underscores.
WORD_RE = re.compile(r"\w+")
#: A token of Google's rouge_score tokenizer (``rouge_score/tokenize.py``:
#: lower-case, replace every character outside ``[a-z0-9]`` by a space, split).
ROUGE_TOKEN_RE = re.compile(r"[a-z0-9]+")
#: A character ROUGE counts as part of a word (its tokenizers keep letters and
#: digits of any script): a text without one scores 0 in every measure.
WORD_CHARACTER_RE = re.compile(r"[^\W_]")


def words(text: str) -> List[str]:
    """Lower-cased Unicode word runs (:data:`WORD_RE`) of ``text``."""
    return WORD_RE.findall(text.lower())


def rouge_tokens(text: str) -> List[str]:
    """``text`` as rouge_score tokenizes it without stemming (:data:`ROUGE_TOKEN_RE`)."""
    return ROUGE_TOKEN_RE.findall(text.lower())


def has_word(text: str) -> bool:
    """Whether ``text`` holds a letter or digit of any script (:data:`WORD_CHARACTER_RE`)."""
    return WORD_CHARACTER_RE.search(text) is not None


#: Unicode general categories of characters that show nothing and carry no
#: word: control characters (Cc), format characters (Cf: the zero-width space,
#: joiners, bidirectional-text controls, the byte-order mark, soft hyphen,
#: tags, ...) and the separators (Zs, Zl, Zp).
NON_CONTENT_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


def has_content(text: str) -> bool:
    """Whether ``text`` holds a character outside :data:`NON_CONTENT_CATEGORIES`
    (a letter, mark, digit, punctuation or symbol). A text without one is empty
    to every encoder: SentencePiece's normalisation removes or spaces most such
    characters, and the rest carry no content to summarise."""
    return any(unicodedata.category(char) not in NON_CONTENT_CATEGORIES for char in text)


# ---------------------------------------------------------------------------
# ROUGE recall of token lists: the paragraph ranker's training labels (Liu &
# Lapata 2019, Sec. 3.1: ROUGE-2 recall against the summary) and mdsfair-rank's
# Table 1 (ROUGE-L recall of the top paragraphs); tokens from rouge_tokens.


def ngram_counts(tokens: Sequence[str], n: int) -> Counter:
    """Counts of the ``n``-grams (tuples) of ``tokens``."""
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def rouge_n_recall(candidate: Sequence[str], reference: Sequence[str], n: int = 2) -> float:
    """ROUGE-N recall: clipped n-gram overlap / n-grams in the reference."""
    reference_counts = ngram_counts(reference, n)
    total = sum(reference_counts.values())
    if total == 0:
        return 0.0
    candidate_counts = ngram_counts(candidate, n)
    overlap = sum(min(count, candidate_counts[gram]) for gram, count in reference_counts.items())
    return overlap / total


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence, bit-parallel (Hyyrö 2004):
    one big-integer update per token of ``b``, so long candidates are cheap."""
    if not a or not b:
        return 0
    match_bits: Dict[str, int] = {}
    for i, token in enumerate(a):
        match_bits[token] = match_bits.get(token, 0) | (1 << i)
    all_ones = (1 << len(a)) - 1
    v = all_ones
    for token in b:
        u = v & match_bits.get(token, 0)
        v = ((v + u) | (v - u)) & all_ones
    return len(a) - bin(v).count("1")


def rouge_l_recall(candidate: Sequence[str], reference: Sequence[str]) -> float:
    """ROUGE-L recall: LCS / reference length (Table 1's metric)."""
    return lcs_length(candidate, reference) / len(reference) if reference else 0.0
