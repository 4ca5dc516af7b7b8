"""Task ``content_selection``: train LoBART's multitask content selection
(MCS) model (Manakul & Gales 2021, Sec. 4; :mod:`mdsfair.models.content_selector`)
on raw JSONL clusters.

MCS runs *before* ``mdsfair-preprocess`` (``mdsfair-rank --method mcs``
writes the clusters with the selected sentences), so this task reads the raw
contract directly, as ``paragraph_ranking`` does: ``{data}/{split}.jsonl``
with ``"documents"`` and ``"summary"``. A cluster's sentences are those of
its documents in stream order, at most ``--max-sentences`` of them (the
authors' ``num_utterances``), each cut to ``--max-sentence-words`` words
(``num_words``); words are the lower-cased ROUGE tokens, over a word
dictionary built from the train split and stored as
``{data}/dict.selector.txt`` (or ``--selector-dict``).

Targets of the two tasks, one batch being a set of clusters::

    net_input = {
      "sentence_tokens":    [B, S, W]  words of every sentence
      "prev_output_tokens": [B, T]     </s> then the summary words
    }
    target:            [B, T]  the summary words then </s> (at most --max-summary-words + 1)
    extractive_target: [B, S]  1 for a sentence of the ROUGE oracle, else 0
                               (mdsfair.preprocess.content_selection.extractive_labels)
"""

import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional

import torch
from fairseq.data import data_utils
from fairseq.tasks import register_task

from mdsfair.argument_types import check_config_sizes
from mdsfair.preprocess.content_selection import cluster_sentences, extractive_labels
from mdsfair.tasks.paragraph_ranking import (
    RawClusterDataset,
    RawClusterTask,
    encode_words,
    load_word_dictionary,
    read_ranking_clusters,
    words,
)
from mdsfair.tasks.training_setup import TrainingSetupConfig, check_not_fully_sharded

logger = logging.getLogger(__name__)

SELECTOR_DICT_NAME = "dict.selector.txt"


@dataclass
class ContentSelectionConfig(TrainingSetupConfig):
    data: str = field(default="", metadata={"help": "directory of raw JSONL splits ({split}.jsonl) with summaries"})
    selector_dict: Optional[str] = field(
        default=None,
        metadata={
            "help": f"word dictionary of the selector (default: {{data}}/{SELECTOR_DICT_NAME}, built from "
            "the train split when missing)"
        },
    )
    selector_vocab_size: int = field(
        default=50000, metadata={"help": "words kept when building the dictionary (most frequent first)"}
    )
    max_sentences: int = field(
        default=1000,
        metadata={
            "help": "read at most this many sentences of a cluster, the first ones (the authors' num_utterances)"
        },
    )
    max_sentence_words: int = field(
        default=50, metadata={"help": "cut every sentence to this many words (the authors' num_words)"}
    )
    max_summary_words: int = field(
        default=143,
        metadata={
            "help": "cut the summary to this many words before </s> (the authors' summary_length of 144 "
            "tokens with the start token)"
        },
    )


class ContentSelectionDataset(RawClusterDataset):
    """Clusters as (sentences, summary, extractive labels)."""

    def __init__(
        self,
        sentences: List[List[torch.Tensor]],
        summaries: List[torch.Tensor],
        labels: List[torch.Tensor],
        pad: int,
        eos: int,
        shuffle: bool = True,
    ):
        super().__init__(sentences, shuffle, {"sentences": sentences, "summary": summaries, "labels": labels})
        self.pad = pad
        self.eos = eos

    def collater(self, samples):
        if not samples:
            return {}
        num_sentences = max(len(s["sentences"]) for s in samples)
        num_words = max(len(x) for s in samples for x in s["sentences"])
        sentence_tokens = torch.full((len(samples), num_sentences, num_words), self.pad, dtype=torch.long)
        extractive_target = torch.zeros(len(samples), num_sentences)
        for row, sample in enumerate(samples):
            for index, sentence in enumerate(sample["sentences"]):
                sentence_tokens[row, index, : len(sentence)] = sentence
            extractive_target[row, : len(sample["labels"])] = sample["labels"]
        targets = [torch.cat([s["summary"], torch.LongTensor([self.eos])]) for s in samples]
        return {
            "id": torch.LongTensor([s["id"] for s in samples]),
            "nsentences": len(samples),
            "ntokens": sum(len(t) for t in targets),
            "net_input": {
                "sentence_tokens": sentence_tokens,
                "prev_output_tokens": data_utils.collate_tokens(
                    targets, self.pad, self.eos, move_eos_to_beginning=True
                ),
            },
            "target": data_utils.collate_tokens(targets, self.pad),
            "extractive_target": extractive_target,
        }


@register_task("content_selection", dataclass=ContentSelectionConfig)
class ContentSelectionTask(RawClusterTask):
    """Learn to summarise a cluster from its sentences and to label the
    sentences of its ROUGE oracle (Sec. 4, the two tasks of MCS)."""

    name = "content_selection"
    cfg: ContentSelectionConfig

    @classmethod
    def setup_task(cls, cfg: ContentSelectionConfig, **kwargs):
        if not cfg.data:
            raise ValueError("--data (a directory of raw JSONL splits) is required for task content_selection")
        check_not_fully_sharded(cfg)
        # a limit of 0 would drop every sentence or summary word silently
        check_config_sizes(cfg, ("selector_vocab_size", "max_sentences", "max_sentence_words", "max_summary_words"))
        dictionary = load_word_dictionary(
            cfg.selector_dict or os.path.join(cfg.data, SELECTOR_DICT_NAME),
            cfg.data,
            cfg.selector_vocab_size,
            lambda cluster: cluster_sentences(cluster) + [cluster.summary],
        )
        return cls(cfg, dictionary)

    def encode_sentences(self, sentences: List[str]) -> List[torch.Tensor]:
        """The first ``--max-sentences`` sentences as word ids, each cut to
        ``--max-sentence-words`` words."""
        return [
            encode_words(self.dictionary, sentence, self.cfg.max_sentence_words)
            for sentence in sentences[: self.cfg.max_sentences]
        ]

    def encode_cluster(self, cluster):
        """(sentence tensors, summary tensor, extractive labels) of a cluster with a summary."""
        sentences = cluster_sentences(cluster)
        # labelled over the whole input, as the authors' labels, then cut with the sentences
        labels = extractive_labels([words(s) for s in sentences], words(cluster.summary))[: self.cfg.max_sentences]
        summary = encode_words(self.dictionary, cluster.summary, self.cfg.max_summary_words)
        return self.encode_sentences(sentences), summary, torch.from_numpy(labels).float()

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        sentences, summaries, labels = [], [], []
        for cluster in read_ranking_clusters(self.split_path(split)):
            encoded, summary, label = self.encode_cluster(cluster)
            sentences.append(encoded)
            summaries.append(summary)
            labels.append(label)
        self.datasets[split] = ContentSelectionDataset(
            sentences, summaries, labels, self.dictionary.pad(), self.dictionary.eos(), shuffle=split == "train"
        )
        logger.info(
            "%s: %d clusters, %d sentences, %d labelled 1",
            split,
            len(sentences),
            sum(len(s) for s in sentences),
            int(sum(label.sum().item() for label in labels)),
        )
