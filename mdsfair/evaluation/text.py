"""Small text helpers used only for scoring and the extractive baselines.

The preprocessing pipeline has its own, richer sentence splitter
(``preprocess/structure.py``). Scoring needs something smaller and fully
predictable, so that a number computed today can be reproduced later from the
same files: :func:`split_sentences` is a rule-based splitter with no model and
no external state.

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
from typing import List, Optional, Sequence

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
_BOUNDARY_RE = re.compile(
    r"""(?P<punct>[.!?]+)(?P<close>["'\u201d\u2019)\]]*)(?P<space>\s+)(?=\S)"""
)
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
        pieces.append(text[begin:match.end()].strip())
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


def split_paragraphs(document: str) -> List[str]:
    """Split a raw-contract document into paragraphs (blank-line separated).

    Single newlines inside a paragraph are treated as spaces.
    """
    paragraphs = re.split(r"\n[ \t\r\f\v]*\n", document.replace("\r\n", "\n"))
    return [" ".join(p.split()) for p in paragraphs if p.strip()]
