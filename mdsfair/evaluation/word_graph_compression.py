"""Multi-sentence compression: Filippova's word graph (2010) with the
keyphrase reranking of Boudin & Morin (2013), the compressor SummPip runs on
each cluster of sentences (:mod:`mdsfair.evaluation.summpip`).

**Word graph** (Filippova 2010, Sec. 3.1). The sentences, each a list of
lower-cased ``(word, POS)`` tokens between a ``-start-`` and an ``-end-``
token, are added one after the other to a directed graph whose nodes are
``(word, POS)`` pairs. A word is mapped onto an existing node with the same
word and POS, never onto one that already holds a word of the same sentence,
in four passes over each sentence, as Boudin's *takahe* implementation of the
paper does:

1. content words (neither stop words nor punctuation) with no candidate node
   or exactly one (mapped unless that node already holds the sentence);
2. content words with several candidates: the candidate whose neighbours in
   the graph share the most with the word's neighbours in the sentence (the
   preceding word among its left contexts plus the following word among its
   right contexts), or, without any overlap, the most frequent candidate;
3. stop words: mapped only when the candidate's context, stop words left
   out, overlaps the sentence's;
4. punctuation: mapped only when the overlap is above one.

Consecutive words of a sentence are joined by an edge. Edge weights are
Filippova's Eq. 2 and 3 (Sec. 3.2)::

    w(e_ij)   = (freq(i) + freq(j)) / sum_s diff(s, i, j)^-1
    w''(e_ij) = w(e_ij) / (freq(i) * freq(j))

where ``freq`` counts the words mapped onto a node and ``diff(s, i, j)`` is
the distance from the first ``i`` to the following ``j`` in sentence ``s``
(a sentence where ``j`` does not follow ``i`` adds nothing).

**Candidates**: the paths from start to end in order of total weight (a
best-first search that never revisits a node on its own path), keeping a path
only if it holds a verb (``VB``, ``VBD``, ``VBP``, ``VBZ``), at least
``min_words`` words that are not punctuation, balanced parentheses, an even
number of quotation marks, and a word sequence not already kept.

**Reranking** (Boudin & Morin 2013, Sec. 3): TextRank (Mihalcea & Tarau 2004)
on the co-occurrence graph of the cluster's adjectives and nouns (an edge per
pair of such words in one sentence, weighted by the number of pairs) scores
each word; keyphrase candidates are the longest runs of adjectives and nouns
matching ``(JJ)*(NNP|NNS|NN)+``, each scored by the sum of its word scores over
its length plus one; keyphrases contained in a longer one are clustered and
the best of each cluster kept, then any keyphrase that is a substring of a
better one dropped. A candidate compression ``c`` with path weight ``W(c)``
is scored ``W(c) / (|c| * (1 + sum of the scores of the keyphrases in c))``;
the lowest score wins.

Two details differ from takahe: a word with several candidate nodes whose
first choice already holds the sentence falls back to the next candidate by
its own index (takahe indexes the shortened list), and TextRank stops when no
word's score moved by 1e-4 or more (takahe looks only at the last word).
"""

import heapq
import itertools
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

Token = Tuple[str, str]  # (lower-cased word, POS tag)
Node = Tuple[str, str, int]  # (word, POS, which of the nodes with this word and POS)

START = "-start-"
END = "-end-"
VERB_TAGS = frozenset({"VB", "VBD", "VBP", "VBZ"})
KEYPHRASE_TAGS = frozenset({"JJ", "NNP", "NNS", "NN", "NNPS"})
KEYPHRASE_PATTERN = re.compile(r"^(JJ)*(NNP|NNS|NN)+$")
TEXTRANK_DAMPING = 0.85
TEXTRANK_TOLERANCE = 1e-4
_PUNCTUATION = re.compile(r"^\W$")

# The English stop word list of takahe (resources/stopwords.en.dat), 119 words.
TAKAHE_STOPWORDS: FrozenSet[str] = frozenset(
    """a about above after again against all am an and any as at be because been before being below between
    both but by cannot could did do does doing down during each few for from further had he her here hers
    herself him himself his how how's i if in into is it its itself me more most my myself no nor not of off
    on once only or other ought our ours ourselves out over own same she so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we what
    when where which while who whom why with would you your yours yourself yourselves""".split()
)


def is_punctuation(word: str) -> bool:
    """One character that is not a word character (takahe's test)."""
    return bool(_PUNCTUATION.match(word))


def node_label(node: Node) -> str:
    """``word/-/POS``, the label takahe orders equal-weight paths by."""
    return f"{node[0]}/-/{node[1]}"


class WordGraph:
    """Filippova's word graph of ``sentences`` (lists of ``(word, POS)``; words
    are lower-cased here) and its best paths; see the module docstring."""

    def __init__(
        self, sentences: Sequence[Sequence[Token]], min_words: int, stopwords: Iterable[str] = TAKAHE_STOPWORDS
    ):
        self.min_words = min_words
        self.stopwords = frozenset(stopwords)
        self.sentences: List[List[Token]] = [
            [(START, START)] + [(word.lower(), tag) for word, tag in sentence] + [(END, END)] for sentence in sentences
        ]
        # node -> [(sentence, position)] of the words mapped onto it
        self.occurrences: Dict[Node, List[Tuple[int, int]]] = {}
        self.successors: Dict[Node, Dict[Node, float]] = defaultdict(dict)
        for index in range(len(self.sentences)):
            self._add_sentence(index)
        for node, targets in self.successors.items():
            for target in targets:
                targets[target] = self.edge_weight(node, target)

    # -- construction ------------------------------------------------------
    def _candidates(self, word: str, tag: str) -> int:
        count = 0
        while (word, tag, count) in self.occurrences:
            count += 1
        return count

    def _holds_sentence(self, node: Node, index: int) -> bool:
        return any(sentence == index for sentence, _ in self.occurrences[node])

    def _context(self, node: Node, side: int, without_stopwords: bool = False) -> List[Token]:
        context = []
        for sentence, position in self.occurrences[node]:
            neighbour = self.sentences[sentence][position + side]
            if not (without_stopwords and neighbour[0] in self.stopwords):
                context.append(neighbour)
        return context

    def _overlap(self, node: Node, previous: Token, following: Token, without_stopwords: bool = False) -> int:
        return self._context(node, -1, without_stopwords).count(previous) + self._context(
            node, 1, without_stopwords
        ).count(following)

    def _new_node(self, word: str, tag: str, count: int, index: int, position: int) -> Node:
        node = (word, tag, count)
        self.occurrences[node] = [(index, position)]
        return node

    def _add_sentence(self, index: int) -> None:
        sentence = self.sentences[index]
        mapping: List[Optional[Node]] = [None] * len(sentence)
        is_stopword = [word in self.stopwords for word, _ in sentence]
        is_mark = [is_punctuation(word) for word, _ in sentence]
        # 1. content words without ambiguity
        for position, (word, tag) in enumerate(sentence):
            if is_stopword[position] or is_mark[position]:
                continue
            count = self._candidates(word, tag)
            if count == 0:
                mapping[position] = self._new_node(word, tag, 0, index, position)
            elif count == 1:
                if not self._holds_sentence((word, tag, 0), index):
                    self.occurrences[(word, tag, 0)].append((index, position))
                    mapping[position] = (word, tag, 0)
                else:
                    mapping[position] = self._new_node(word, tag, 1, index, position)
        # 2. content words with several candidates
        for position, (word, tag) in enumerate(sentence):
            if is_stopword[position] or is_mark[position] or mapping[position] is not None:
                continue
            count = self._candidates(word, tag)
            previous, following = sentence[position - 1], sentence[position + 1]
            remaining = [
                (self._overlap((word, tag, k), previous, following), len(self.occurrences[(word, tag, k)]), k)
                for k in range(count)
            ]
            chosen = None
            while remaining:
                best = max(range(len(remaining)), key=lambda r: (remaining[r][0], -r))
                if remaining[best][0] == 0:
                    best = max(range(len(remaining)), key=lambda r: (remaining[r][1], -r))
                candidate = (word, tag, remaining[best][2])
                if not self._holds_sentence(candidate, index):
                    chosen = candidate
                    break
                del remaining[best]
            if chosen is not None:
                self.occurrences[chosen].append((index, position))
                mapping[position] = chosen
            else:
                mapping[position] = self._new_node(word, tag, count, index, position)
        # 3. stop words (context without stop words, some overlap needed), 4. punctuation (overlap above one)
        for kind, needed, without_stopwords in ((is_stopword, 0, True), (is_mark, 1, False)):
            for position, (word, tag) in enumerate(sentence):
                if not kind[position]:
                    continue
                count = self._candidates(word, tag)
                if count == 0:
                    mapping[position] = self._new_node(word, tag, 0, index, position)
                    continue
                previous, following = sentence[position - 1], sentence[position + 1]
                overlaps = [self._overlap((word, tag, k), previous, following, without_stopwords) for k in range(count)]
                best = max(range(count), key=lambda k: (overlaps[k], -k))
                candidate = (word, tag, best)
                if overlaps[best] > needed and not self._holds_sentence(candidate, index):
                    self.occurrences[candidate].append((index, position))
                    mapping[position] = candidate
                else:
                    mapping[position] = self._new_node(word, tag, count, index, position)
        for source, target in zip(mapping, mapping[1:]):
            self.successors[source].setdefault(target, 0.0)

    def edge_weight(self, first: Node, second: Node) -> float:
        """Filippova's w''(e_ij) (Eq. 2-3): ``(freq(i) + freq(j)) / sum_s diff(s,i,j)^-1 / (freq(i) freq(j))``."""
        first_positions, second_positions = defaultdict(list), defaultdict(list)
        for sentence, position in self.occurrences[first]:
            first_positions[sentence].append(position)
        for sentence, position in self.occurrences[second]:
            second_positions[sentence].append(position)
        inverse_distances = 0.0
        for sentence, positions in first_positions.items():
            distances = [b - a for a in positions for b in second_positions.get(sentence, ()) if b > a]
            if distances:
                inverse_distances += 1.0 / min(distances)
        first_count, second_count = len(self.occurrences[first]), len(self.occurrences[second])
        return (first_count + second_count) / inverse_distances / (first_count * second_count)

    # -- paths -------------------------------------------------------------
    def _acceptable(self, words: Sequence[Token]) -> bool:
        verbs = sum(tag in VERB_TAGS for _, tag in words)
        length = sum(not is_punctuation(word) for word, _ in words)
        parentheses = sum((word == ")") - (word == "(") for word, _ in words)
        quotes = sum(word == '"' for word, _ in words)
        return verbs > 0 and length >= self.min_words and parentheses == 0 and quotes % 2 == 0

    def best_paths(self, count: int) -> List[Tuple[float, List[Token]]]:
        """Up to ``count`` acceptable start-to-end paths, lightest first, as
        ``(total weight, [(word, POS), ...])`` without the start and end tokens."""
        start, end = (START, START, 0), (END, END, 0)
        if start not in self.occurrences or end not in self.occurrences:
            return []
        visits = defaultdict(itertools.count)
        queue = [(0.0, node_label(start), 0, next(visits[start]), (start,))]
        found: List[Tuple[float, List[Token]]] = []
        seen = set()
        while queue and len(found) < count:
            weight, _, _, _, path = heapq.heappop(queue)
            for node, edge in self.successors[path[-1]].items():
                if node in path:
                    continue
                total = weight + edge
                if node == end:
                    words = [(word, tag) for word, tag, _ in path[1:]]
                    key = " ".join(word for word, _ in words)
                    if self._acceptable(words) and key not in seen:
                        seen.add(key)
                        found.append((total, words))
                else:
                    heapq.heappush(queue, (total, node_label(node), node[2], next(visits[node]), path + (node,)))
        return sorted(found)


class KeyphraseReranker:
    """Boudin & Morin's keyphrase scores of a cluster of tagged sentences; see the module docstring."""

    def __init__(self, sentences: Sequence[Sequence[Token]]):
        sentences = [[(word.lower(), tag) for word, tag in sentence] for sentence in sentences]
        self.cooccurrence: Dict[Token, Dict[Token, int]] = {}
        for sentence in sentences:
            kept = [token for token in sentence if token[1] in KEYPHRASE_TAGS]
            for token in kept:
                self.cooccurrence.setdefault(token, {})
            for first, second in itertools.combinations(kept, 2):
                self.cooccurrence[first][second] = self.cooccurrence[first].get(second, 0) + 1
                if second != first:
                    self.cooccurrence[second][first] = self.cooccurrence[second].get(first, 0) + 1
        self.word_scores = self.textrank()
        candidates: Dict[str, List[Token]] = {}
        for sentence in sentences:
            run: List[Token] = []
            for token in sentence + [("", "")]:
                if token[1] in KEYPHRASE_TAGS:
                    run.append(token)
                    continue
                if run and KEYPHRASE_PATTERN.search("".join(tag for _, tag in run)):
                    candidates[" ".join(word for word, _ in run)] = run
                run = []
        scores = {
            phrase: sum(self.word_scores[token] for token in tokens) / (len(tokens) + 1.0)
            for phrase, tokens in candidates.items()
        }
        self.keyphrase_scores = self._without_redundancy(candidates, scores)

    def textrank(self) -> Dict[Token, float]:
        """Weighted TextRank scores: ``WS(V_i) = (1-d) + d * sum_j w_ji / sum_k w_jk * WS(V_j)``."""
        scores = {token: 1.0 for token in self.cooccurrence}
        totals = {token: sum(neighbours.values()) for token, neighbours in self.cooccurrence.items()}
        while scores:
            updated = {
                token: (1 - TEXTRANK_DAMPING)
                + TEXTRANK_DAMPING
                * sum(weight * scores[neighbour] / totals[neighbour] for neighbour, weight in neighbours.items())
                for token, neighbours in self.cooccurrence.items()
            }
            change = max(abs(updated[token] - scores[token]) for token in scores)
            scores = updated
            if change < TEXTRANK_TOLERANCE:
                break
        return scores

    @staticmethod
    def _without_redundancy(candidates: Dict[str, List[Token]], scores: Dict[str, float]) -> Dict[str, float]:
        longest_first = sorted(candidates, key=lambda phrase: len(candidates[phrase]), reverse=True)
        groups: Dict[str, List[str]] = {}
        for phrase in longest_first:
            words = set(phrase.split(" "))
            containing = [group for group in groups if words <= set(group.split(" "))]
            for group in containing:
                groups[group].append(phrase)
            if not containing:
                groups[phrase] = [phrase]
        best = [sorted(members, key=lambda phrase: scores[phrase], reverse=True)[0] for members in groups.values()]
        kept: List[str] = []
        for phrase in sorted(best, key=lambda phrase: scores[phrase], reverse=True):
            if not any(phrase in previous for previous in kept):
                kept.append(phrase)
        return {phrase: scores[phrase] for phrase in kept}

    def rerank(self, candidates: Sequence[Tuple[float, List[Token]]]) -> List[Tuple[float, List[Token]]]:
        """The candidates by ``W(c) / (|c| (1 + keyphrase scores in c))``, best (lowest) first."""
        reranked = []
        for weight, words in candidates:
            text = " ".join(word for word, _ in words)
            keyphrases = 1.0 + sum(score for phrase, score in self.keyphrase_scores.items() if phrase in text)
            reranked.append((weight / (len(words) * keyphrases), words))
        return sorted(reranked)


@dataclass(frozen=True)
class Compression:
    """The compression chosen for a cluster of sentences and its reranked score."""

    words: List[Token]
    score: float

    @property
    def text(self) -> str:
        return " ".join(word for word, _ in self.words)


def compress_sentences(
    sentences: Sequence[Sequence[Token]], min_words: int, candidates: int = 3
) -> Optional[Compression]:
    """The best of the ``candidates`` lightest word-graph paths of ``sentences``
    after keyphrase reranking, or None when no path is acceptable."""
    paths = WordGraph(sentences, min_words).best_paths(candidates)
    if not paths:
        return None
    score, words = KeyphraseReranker(sentences).rerank(paths)[0]
    return Compression(words, score)
