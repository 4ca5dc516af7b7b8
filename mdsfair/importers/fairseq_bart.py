"""fairseq BART checkpoints: writing one from converted weights, and what
fairseq's released ``bart.base`` / ``bart.large`` / ``bart.large.cnn`` need.

Writing (:func:`save_fairseq_checkpoint`): the importers build the same
training namespace ``fairseq-train --arch ARCH`` would (so every model
argument has its architecture default) and store it as today's fairseq does,
``cfg`` (converted with fairseq's ``convert_namespace_to_omegaconf``) next to
``model``, plus the ``optimizer_history`` / ``extra_state`` entries that
``--restore-file`` reads: one history entry at update 0 and a training
iterator at epoch 1, so restoring with or without ``--reset-*`` starts fresh.
No ``last_optimizer_state`` is written, so no optimizer state is restored.

fairseq's released BART checkpoints predate today's fairseq: a pickled
``argparse.Namespace`` under ``args`` (no ``cfg``), the argument names of
their time (``min_lr``, ``max_sentences``, ``lr`` as a float, string
booleans such as ``left_pad_source='True'``), ``encoder.version`` /
``decoder.version`` buffers, no ``decoder.output_projection.weight`` (the
decoder projected with the tied embedding), and for the pretrained
``bart.base`` / ``bart.large`` one more embedding row than ``dict.txt`` has
symbols: ``<mask>``, which the denoising task appended (``bart.base``'s
``dict.txt`` is padded with ``madeupword`` symbols to 51,196 lines). fairseq's
own loading handles all of it, which ``tests/test_import_fairseq_bart.py``
checks on checkpoints built in exactly that layout, restored into every
BART-based architecture:

* ``checkpoint_utils._upgrade_state_dict`` converts ``args`` to ``cfg``
  (``min_lr`` -> ``stop_min_lr``, a float ``lr`` -> ``[lr]``, ...);
* ``TransformerDecoderBase.upgrade_state_dict_named`` copies the tied
  embedding to ``output_projection.weight``;
* ``BARTModel.upgrade_state_dict_named`` drops the ``<mask>`` row when the
  task's dictionary (``dict.txt`` of the data-bin) has no ``<mask>``;
* the mdsfair models add what BART lacks in their own
  ``upgrade_state_dict_named`` (HierEncDec tiles the 1,026-row position table
  to ``--max-source-positions`` + 2 rows, PageSum adds its confidence layer,
  the sparse decoder its approximator).

So the command is the README's:
``fairseq-train DATA --user-dir mdsfair --task multidoc_summarization --arch ARCH
--restore-file bart.large/model.pt --reset-optimizer --reset-dataloader --reset-meters``.
"""

import argparse
import logging
import os
import warnings
from typing import Dict, Optional, Sequence

import torch

TASK = "multidoc_summarization"


def training_namespace(arch: str, flags: Sequence[str] = (), task: str = TASK, data: str = ".") -> argparse.Namespace:
    """The namespace ``fairseq-train DATA --task TASK --arch ARCH FLAGS`` builds,
    every model argument set by the architecture's defaults where ``flags``
    leave it."""
    from fairseq import options

    import mdsfair

    mdsfair.register()  # the task and the mdsfair architectures

    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, [data, "--task", task, "--arch", arch, *flags])


def checkpoint_state(args: argparse.Namespace, model_state: Dict[str, torch.Tensor]) -> Dict:
    """A checkpoint dictionary as today's fairseq trainer writes one, at update 0."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    logging.getLogger("hydra").setLevel(logging.WARNING)  # its job-runtime debug lines
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hydra's deprecation notices about fairseq's own config files
        cfg = convert_namespace_to_omegaconf(args)
    return {
        "args": None,
        "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "model": model_state,
        "criterion": None,
        "optimizer_history": [
            {
                "criterion_name": "CrossEntropyCriterion",
                "optimizer_name": "none",
                "lr_scheduler_state": {},
                "num_updates": 0,
            }
        ],
        "task_state": {},
        "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}},
    }


def save_fairseq_checkpoint(
    path: str, args: argparse.Namespace, model_state: Dict[str, torch.Tensor], record: Optional[Dict] = None
) -> str:
    """Write ``model_state`` with ``args`` as a fairseq checkpoint at ``path``;
    ``record`` (:func:`mdsfair.importers.output.import_record`: the
    fingerprints of the dictionary and subword files, the weights' checksum)
    goes where a checkpoint trained here keeps it."""
    from fairseq.checkpoint_utils import torch_persistent_save

    from mdsfair.checkpoints.record import RECORD_KEY

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    state = checkpoint_state(args, model_state)
    if record is not None:
        state["task_state"][RECORD_KEY] = record
    torch_persistent_save(state, path)
    return path
