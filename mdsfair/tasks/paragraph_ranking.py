"""Task ``paragraph_ranking``: train the paragraph ranker of Liu & Lapata
(2019, Section 3.1) on raw JSONL clusters.

The ranker runs *before* ``mdsfair-preprocess`` (``mdsfair-rank`` writes the
clusters with ranked paragraphs), so this task reads the raw contract
directly: ``{data}/{split}.jsonl`` with ``"title"`` (the query; a cluster
without one gets an empty title), ``"documents"`` and ``"summary"``. Text is
lower-cased and split into alphanumeric word tokens (the ROUGE tokenization),
over a word dictionary built from the train split and stored as
``{data}/dict.ranker.txt`` (or ``--ranker-dict``).

Every paragraph's target is its ROUGE-2 recall against the gold summary
(Section 4); a batch is a set of clusters::

    net_input = {
      "title_tokens":      [B, T_t]   one title per cluster
      "paragraph_tokens":  [N, T_p]   all paragraphs of the batch
      "paragraph_cluster": [N]        the cluster of each paragraph
    }
    target: [N] float ROUGE-2 recall
"""

import logging
import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
from fairseq.data import Dictionary, FairseqDataset, data_utils
from fairseq.tasks import FairseqTask, register_task

from mdsfair.argument_types import check_config_sizes
from mdsfair.preprocess.subword import text_symbol_indices
from mdsfair.tasks.training_setup import TrainingSetupConfig, check_not_fully_sharded, check_training_setup
from mdsfair.text import rouge_n_recall, rouge_tokens

logger = logging.getLogger(__name__)

RANKER_DICT_NAME = "dict.ranker.txt"

#: ROUGE-style tokens (rouge_score's tokenizer) of the ranker's vocabulary and labels
words = rouge_tokens


@dataclass
class ParagraphRankingConfig(TrainingSetupConfig):
    data: str = field(
        default="", metadata={"help": "directory of raw JSONL splits ({split}.jsonl) with titles and summaries"}
    )
    ranker_dict: Optional[str] = field(
        default=None,
        metadata={
            "help": f"word dictionary of the ranker (default: {{data}}/{RANKER_DICT_NAME}, built from "
            "the train split when missing)"
        },
    )
    ranker_vocab_size: int = field(
        default=50000, metadata={"help": "words kept when building the dictionary (most frequent first)"}
    )
    max_title_tokens: int = field(default=32, metadata={"help": "cut titles to this many words"})
    max_paragraph_tokens: int = field(
        default=100, metadata={"help": "cut paragraphs to this many words (WikiSum paragraphs average 70)"}
    )
    max_cluster_paragraphs: Optional[int] = field(
        default=None,
        metadata={"help": "train on at most this many paragraphs per cluster (the first ones in stream order)"},
    )


def read_ranking_clusters(path: str):
    """The :class:`mdsfair.preprocess.structure.ClusterStructure` of every line."""
    from mdsfair.preprocess.structure import SentenceSplitter, read_clusters

    return list(read_clusters(path, SentenceSplitter("rule"), require_summary=True))


def load_word_dictionary(
    path: str, data: str, vocab_size: int, cluster_texts: Callable[[object], List[str]]
) -> Dictionary:
    """The word dictionary at ``path``; when missing, built from the words of
    ``cluster_texts(cluster)`` over ``{data}/train.jsonl`` (the ``vocab_size``
    most frequent) and saved there."""
    if os.path.exists(path):
        return Dictionary.load(path)
    train = os.path.join(data, "train.jsonl")
    if not os.path.exists(train):
        raise FileNotFoundError(f"neither {path} nor {train} (to build it from) exists")
    dictionary = Dictionary()
    for cluster in read_ranking_clusters(train):
        for text in cluster_texts(cluster):
            for word in words(text):
                dictionary.add_symbol(word)
    dictionary.finalize(nwords=vocab_size)
    dictionary.save(path)
    logger.info("built the word dictionary from %s: %d types -> %s", train, len(dictionary), path)
    return dictionary


def encode_words(dictionary: Dictionary, text: str, limit: int) -> torch.Tensor:
    """The first ``limit`` words of ``text`` as ids of ``dictionary`` (one
    ``<unk>`` for a text without a word)."""
    # the pipeline's lookup (a word is never a control id of the dictionary; issue 34 item 1)
    tokens = text_symbol_indices(dictionary, words(text)[:limit]).tolist()
    return torch.LongTensor(tokens or [dictionary.unk()])


class RawClusterDataset(FairseqDataset):
    """Clusters read from raw JSONL, each a list of token sequences (its
    paragraphs or sentences), batched by size: a cluster's size is its
    sequences times its longest one (the tokens of the padded block it makes);
    the train split is shuffled within equal sizes. Example ``i`` is its
    ``id`` and the ``i``-th value of each of ``fields`` (name -> one value a
    cluster), under the field's name."""

    def __init__(self, sequences: List[List[torch.Tensor]], shuffle: bool, fields: Dict[str, Sequence]):
        self.shuffle = shuffle
        self.fields = fields
        self.sizes = np.array([len(seqs) * max(len(x) for x in seqs) for seqs in sequences], dtype=np.int64)

    def __getitem__(self, index):
        return {"id": index, **{name: values[index] for name, values in self.fields.items()}}

    def __len__(self):
        return len(self.sizes)

    def num_tokens(self, index):
        return int(self.sizes[index])

    def size(self, index):
        return int(self.sizes[index])

    def ordered_indices(self):
        if self.shuffle:
            order = np.random.permutation(len(self))
            return order[np.argsort(self.sizes[order], kind="mergesort")]
        return np.argsort(self.sizes, kind="mergesort")


class ParagraphRankingDataset(RawClusterDataset):
    """Clusters as (title, paragraphs, ROUGE-2 recall targets)."""

    def __init__(
        self,
        titles: List[torch.Tensor],
        paragraphs: List[List[torch.Tensor]],
        targets: List[torch.Tensor],
        pad: int,
        shuffle: bool = True,
    ):
        super().__init__(paragraphs, shuffle, {"title": titles, "paragraphs": paragraphs, "target": targets})
        self.pad = pad

    def collater(self, samples):
        if not samples:
            return {}
        paragraphs = [p for s in samples for p in s["paragraphs"]]
        cluster = torch.cat([torch.full((len(s["paragraphs"]),), i, dtype=torch.long) for i, s in enumerate(samples)])
        return {
            "id": torch.LongTensor([s["id"] for s in samples]),
            "nsentences": len(samples),
            "ntokens": len(paragraphs),
            "net_input": {
                "title_tokens": data_utils.collate_tokens([s["title"] for s in samples], self.pad),
                "paragraph_tokens": data_utils.collate_tokens(paragraphs, self.pad),
                "paragraph_cluster": cluster,
            },
            "target": torch.cat([s["target"] for s in samples]),
        }


class RawClusterTask(FairseqTask):
    """A task that reads raw JSONL splits (``{data}/{split}.jsonl``) with one
    word dictionary for its inputs and targets; ``name`` is the name it is
    registered under."""

    name = ""

    def __init__(self, cfg, dictionary: Dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary

    def build_model(self, cfg, from_checkpoint=False):
        """fairseq's; a model built for training (not from a checkpoint) first
        passes :func:`~mdsfair.tasks.training_setup.check_training_setup`."""
        if not from_checkpoint:
            check_training_setup(self.cfg)
        return super().build_model(cfg, from_checkpoint)

    def split_path(self, split: str) -> str:
        """``{data}/{split}.jsonl``; FileNotFoundError naming the task when missing."""
        path = os.path.join(self.cfg.data, f"{split}.jsonl")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} not found (split {split!r} of task {self.name})")
        return path

    def max_positions(self):
        return None

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary


@register_task("paragraph_ranking", dataclass=ParagraphRankingConfig)
class ParagraphRankingTask(RawClusterTask):
    """Learn ROUGE-2 recall of paragraphs against the gold summary from the
    title and the paragraph (Section 3.1)."""

    name = "paragraph_ranking"
    cfg: ParagraphRankingConfig

    @classmethod
    def dictionary_path(cls, cfg: ParagraphRankingConfig) -> str:
        return cfg.ranker_dict or os.path.join(cfg.data, RANKER_DICT_NAME)

    @classmethod
    def setup_task(cls, cfg: ParagraphRankingConfig, **kwargs):
        if not cfg.data:
            raise ValueError("--data (a directory of raw JSONL splits) is required for task paragraph_ranking")
        check_not_fully_sharded(cfg)
        # a limit of 0 would drop every title or paragraph silently
        check_config_sizes(
            cfg, ("ranker_vocab_size", "max_title_tokens", "max_paragraph_tokens", "max_cluster_paragraphs")
        )
        dictionary = load_word_dictionary(
            cls.dictionary_path(cfg),
            cfg.data,
            cfg.ranker_vocab_size,
            lambda cluster: [cluster.title or ""] + cluster.paragraphs(),
        )
        return cls(cfg, dictionary)

    def encode_words(self, text: str, limit: int) -> torch.Tensor:
        return encode_words(self.dictionary, text, limit)

    def encode_cluster(self, cluster, max_paragraphs: Optional[int] = None):
        """(title tensor, paragraph tensors, ROUGE-2 recall targets or None)."""
        paragraphs = cluster.paragraphs()[:max_paragraphs]
        title = self.encode_words(cluster.title or "", self.cfg.max_title_tokens)
        encoded = [self.encode_words(p, self.cfg.max_paragraph_tokens) for p in paragraphs]
        targets = None
        if cluster.summary:
            summary = words(cluster.summary)
            targets = torch.tensor([rouge_n_recall(words(p), summary, 2) for p in paragraphs], dtype=torch.float)
        return title, encoded, targets

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        titles, paragraphs, targets = [], [], []
        for cluster in read_ranking_clusters(self.split_path(split)):
            title, encoded, target = self.encode_cluster(cluster, self.cfg.max_cluster_paragraphs)
            titles.append(title)
            paragraphs.append(encoded)
            targets.append(target)
        self.datasets[split] = ParagraphRankingDataset(
            titles, paragraphs, targets, self.dictionary.pad(), shuffle=split == "train"
        )
        logger.info("%s: %d clusters, %d paragraphs", split, len(titles), sum(len(p) for p in paragraphs))
