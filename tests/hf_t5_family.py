"""What the T5 family's comparisons with Hugging Face share
(``tests/test_t5.py``, ``tests/test_longt5.py``): a tiny SentencePiece model
with T5's tokenizer files, padded batches in Hugging Face's ids, greedy and
beam search run by fairseq and by Hugging Face's ``generate`` under the
same rules, real text from the data sets, and edited copies of a model
folder."""

import glob
import json
import os
import shutil
from typing import List, Sequence

import pytest
import torch

from tests.utils import SHARED_DATA

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

#: A few lines to train the tiny SentencePiece model on.
TRAINING_LINES = [
    "The committee approved the new budget for the coming year.",
    "Researchers reported that the model summarizes several documents at once.",
    "Reviewers asked the authors to compare against stronger baselines.",
    "The city council met on Tuesday to discuss public transport.",
    "A summary should keep the facts that every source agrees on.",
    "Prices rose by 3 percent in March, the agency said.",
] * 4


def save_t5_tokenizer(folder: str) -> None:
    """``spiece.model`` (80 pieces; ``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2) and
    ``T5Tokenizer``'s files with 100 sentinels, in ``folder``: 184 token ids
    with the 4 unnamed embedding rows the tests' models add."""
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_LINES),
        model_prefix=os.path.join(folder, "spiece"),
        vocab_size=80,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        character_coverage=1.0,
        minloglevel=2,
    )
    # loaded from a folder holding only spiece.model, as the Hub's v1.1 folders were made
    tokenizer = transformers.T5Tokenizer.from_pretrained(folder, extra_ids=100)
    tokenizer.save_pretrained(folder)


#: The tiny models' configuration: d 32, 4 heads of 8, d_ff 64, 2 + 2
#: layers, 8 buckets up to distance 16, gated GELU, no output scaling, no
#: dropout, T5's special ids; 184 embedding rows (80 pieces, 100 sentinels
#: and 4 rows no token names).
TINY_CONFIG = {
    "vocab_size": 184,
    "d_model": 32,
    "d_ff": 64,
    "d_kv": 8,
    "num_heads": 4,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "relative_attention_num_buckets": 8,
    "relative_attention_max_distance": 16,
    "feed_forward_proj": "gated-gelu",
    "tie_word_embeddings": False,
    "dropout_rate": 0.0,
    "layer_norm_epsilon": 1e-6,
    "decoder_start_token_id": 0,
    "pad_token_id": 0,
    "eos_token_id": 1,
}


def save_perturbed(model, folder: str) -> str:
    """``model``'s weights moved off their initial values (layer norms away
    from 1, a spread of logits), saved in ``folder`` as the Hub stores them."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    return folder


def imported_model(import_function, hf_folder: str, out_dir: str):
    """``import_function(hf_folder, out_dir)`` (an ``mdsfair-import`` kind's)
    and its ``model.pt`` loaded as ``fairseq-generate`` loads it, in float64:
    the import's summary, the model, the task and ``out_dir``."""
    from fairseq import checkpoint_utils

    summary = import_function(hf_folder, out_dir, overwrite=True)
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [os.path.join(out_dir, "model.pt")], arg_overrides={"data": out_dir}
    )
    return summary, models[0].double().eval(), task, out_dir


def padded_batch(lengths: Sequence[int], seed: int = 1):
    """Hugging Face sources of ``lengths`` (random pieces, then ``</s>``),
    right-padded with 0, and their mask."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = torch.randint(3, 180, (length - 1,), generator=generator)
        ids[row, length - 1] = 1
    return ids, ids.ne(0).long()


def left_padded(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The sources in fairseq's ids, left-padded with fairseq's ``<pad>`` as fairseq's data sets pad them."""
    left = torch.ones_like(ids)
    for row, length in enumerate(mask.sum(1).tolist()):
        left[row, ids.size(1) - length :] = ids[row, :length] + 1
    return left


def fairseq_hypotheses(model, task, ids, mask, beam: int, max_len: int) -> List[List[int]]:
    """fairseq's ``SequenceGenerator`` on the sources (fairseq index = Hugging Face id + 1), in Hugging Face's ids."""
    from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator([model], task.target_dictionary, beam_size=beam, max_len_a=0, max_len_b=max_len,
                                  min_len=0)  # fmt: skip
    sample = {"net_input": {"src_tokens": ids + 1, "src_lengths": mask.sum(1)}}
    with torch.no_grad():
        results = generator.generate([model], sample)
    return [(result[0]["tokens"] - 1).tolist() for result in results]


class FairseqLengthLimit(transformers.LogitsProcessor):
    """fairseq's rule at its length limit, for Hugging Face's generate: after
    ``max_len`` tokens only ``</s>`` remains, with its own log-probability
    (Hugging Face's ``forced_eos_token_id`` gives it 0)."""

    def __init__(self, max_len: int, eos: int):
        self.max_len, self.eos = max_len, eos

    def __call__(self, input_ids, scores):
        if input_ids.size(1) - 1 < self.max_len:  # without the start token
            return scores
        limited = torch.full_like(scores, -float("inf"))
        limited[:, self.eos] = scores[:, self.eos]
        return limited


def hf_hypotheses(hf_model, ids, mask, beam: int, max_len: int) -> List[List[int]]:
    """Hugging Face's ``generate`` under fairseq's rules (no ``<pad>``, its length limit, length penalty 1)."""
    with torch.no_grad():
        output = hf_model.generate(
            input_ids=ids,
            attention_mask=mask,
            num_beams=beam,
            do_sample=False,
            max_new_tokens=max_len + 1,
            early_stopping=True,
            length_penalty=1.0,
            suppress_tokens=[0],  # fairseq's generators never produce <pad>
            logits_processor=transformers.LogitsProcessorList([FairseqLengthLimit(max_len, eos=1)]),
        )
    hypotheses = []
    for row in output[:, 1:].tolist():  # without the start token
        hypotheses.append(row[: row.index(1) + 1] if 1 in row else row)
    return hypotheses


def real_lines() -> List[str]:
    """Summaries and document openings of three Multi-XScience clusters."""
    files = sorted(glob.glob(os.path.join(SHARED_DATA, "multi_xscience", "jsonl", "*.jsonl")))
    if not files:
        pytest.skip(f"{SHARED_DATA}/multi_xscience is not there")
    with open(files[0]) as handle:
        clusters = [json.loads(line) for _index, line in zip(range(3), handle)]
    return [cluster["summary"] for cluster in clusters] + [cluster["documents"][0][:500] for cluster in clusters]


def copy_of(hf_folder: str, tmp_path, config_edit=None, drop_tensor=None, tensor_edit=None) -> str:
    """A copy of ``hf_folder`` with ``config.json`` updated by ``config_edit``,
    the tensor ``drop_tensor`` removed and ``tensor_edit`` (name -> tensor) written."""
    from safetensors.torch import load_file, save_file

    folder = str(tmp_path / "hf_copy")
    shutil.copytree(hf_folder, folder)
    if config_edit:
        path = os.path.join(folder, "config.json")
        config = json.load(open(path))
        config.update(config_edit)
        json.dump(config, open(path, "w"))
    if drop_tensor or tensor_edit:
        path = os.path.join(folder, "model.safetensors")
        state = load_file(path)
        state.pop(drop_tensor, None)
        state.update(tensor_edit or {})
        save_file(state, path)
    return folder
