"""``mdsfair-import hiersumm CKPT SPM_MODEL OUT_DIR``: the Hierarchical
Transformer that Liu & Lapata released with their code (nlpyang/hiersumm) as
an mdsfair ``hiertransformer_hiersumm`` checkpoint.

Their checkpoint (an OpenNMT-style ``torch.save`` dict of ``model`` and
``opt``) is read and checked by :mod:`mdsfair.importers.hiersumm_checkpoint`;
its vocabulary is the SentencePiece model it was trained with
(``spm9998_3.model``, whose special pieces are ``<PAD> <S> </S> <T> <P>
<Q>``), ordered for fairseq by :mod:`mdsfair.importers.hiersumm_vocabulary`;
its parameters take our names in :mod:`mdsfair.importers.hiersumm_weights`
(the table of names, old and new, is there).

``OUT_DIR`` receives

* ``model.pt``: a fairseq checkpoint of ``--arch hiertransformer_hiersumm``
  with their dimensions, layer counts and dropouts, computing what their
  ``Summarizer`` computes (tested against a reimplementation of their
  equations, tests/test_import_hiersumm.py);
* ``dict.txt``: fairseq's ``<s> <pad> </s> <unk>`` carry their ``<S>``,
  ``<PAD>``, ``</S>`` and unknown piece, then every other piece in the
  SentencePiece model's order, so the vocabulary is theirs, permuted (no
  entry added or lost, every embedding row and generator bias kept);
* ``spm.model`` (a copy of ``SPM_MODEL``) and ``mdsfair.json``, a data-bin
  manifest without splits, so that ``OUT_DIR`` serves as the data directory
  of the hub (``summarize()`` on raw clusters);

and the command prints how to binarize WikiSum clusters for it::

    mdsfair-preprocess --input-dir wikisum/ --destdir data-bin --spm-model OUT_DIR/spm.model \\
        --dict OUT_DIR/dict.txt --lowercase

What this arch cannot represent is refused with the reason and the file: a flat (``-hier false``)
encoder, global layers that are not the top ones, untied embeddings, a
vocabulary that does not match the SentencePiece model.
"""

import argparse
import logging
import os
import shutil
import sys
from types import SimpleNamespace
from typing import Dict, List, Optional

from mdsfair.importers import ImportRefused
from mdsfair.importers.hiersumm_checkpoint import (
    HiersummImportError,
    check_options_against_weights,
    hiersumm_options,
    load_hiersumm_checkpoint,
)
from mdsfair.importers.hiersumm_vocabulary import build_dictionary, sentencepiece_order
from mdsfair.importers.hiersumm_weights import convert_state_dict

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = "model.pt"


def model_arguments(options: SimpleNamespace, out_dir: str, max_target_positions: int) -> argparse.Namespace:
    from fairseq import options as fairseq_options

    import mdsfair

    mdsfair.register()  # the task and hiertransformer_hiersumm (--user-dir skips an mdsfair imported already)
    argv = [
        out_dir,
        "--user-dir",
        os.path.dirname(os.path.abspath(mdsfair.__file__)),
        "--task",
        "multidoc_summarization",
        "--arch",
        "hiertransformer_hiersumm",
        "--encoder-embed-dim",
        str(options.embed_dim),
        "--decoder-embed-dim",
        str(options.embed_dim),
        "--encoder-ffn-embed-dim",
        str(options.ffn_dim),
        "--decoder-ffn-embed-dim",
        str(options.ffn_dim),
        "--encoder-attention-heads",
        str(options.heads),
        "--decoder-attention-heads",
        str(options.heads),
        "--local-layers",
        str(options.num_local),
        "--global-layers",
        str(options.num_global),
        "--global-heads",
        str(options.global_heads),
        "--decoder-layers",
        str(options.decoder_layers),
        "--dropout",
        str(options.dropout),
        "--attention-dropout",
        str(options.dropout),
        "--activation-dropout",
        str(options.dropout),
        # the authors' test setting: the 40 best paragraphs (-trunc_src_nblock 40), targets up to 400 tokens
        "--max-paragraphs",
        "40",
        "--max-source-positions",
        "8192",
        "--max-target-positions",
        str(max_target_positions),
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9,0.998)",
        "--adam-eps",
        "1e-9",
    ]
    return fairseq_options.parse_args_and_arch(fairseq_options.get_training_parser(), argv)


def import_manifest(lowercase: bool, source: Dict[str, object]) -> Dict:
    """``mdsfair.json`` of the import: a data-bin without splits (SentencePiece)."""
    from mdsfair.data.manifest import MANIFEST_VERSION, STRUCTURE_STREAMS
    from mdsfair.preprocess.subword import SPM_MODEL_NAME

    manifest = {
        "format": "mdsfair-binarized",
        "version": MANIFEST_VERSION,
        "dictionary": "dict.txt",
        "subword": {"type": "sentencepiece", "model": SPM_MODEL_NAME},
        "sentence_splitter": "rule",
        "lowercase": lowercase,
        "title_document": False,
        "side_data": {},
        "side_data_args": {},
        "structure": list(STRUCTURE_STREAMS),
        "splits": {},
        "imported_from": source,
    }
    return manifest


def import_hiersumm(
    checkpoint: str, spm_model: str, out_dir: str, lowercase: bool = True, overwrite: bool = False
) -> str:
    """Convert; returns the path of the written fairseq checkpoint."""
    import sentencepiece
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from mdsfair.checkpoints.record import RECORD_KEY
    from mdsfair.importers.output import ImportOutput, import_record
    from mdsfair.models.hiertransformer import HierarchicalTransformerModel
    from mdsfair.preprocess.subword import SPM_MODEL_NAME

    theirs, opt = load_hiersumm_checkpoint(checkpoint)
    options = hiersumm_options(opt, checkpoint)
    check_options_against_weights(options, theirs, checkpoint)
    if not os.path.isfile(spm_model):
        raise HiersummImportError(f"{spm_model}: SentencePiece model not found")
    try:
        processor = sentencepiece.SentencePieceProcessor(model_file=spm_model)
    except Exception as e:
        raise HiersummImportError(f"{spm_model}: not a SentencePiece model ({e})") from None
    symbols, order = sentencepiece_order(processor, spm_model)
    dictionary = build_dictionary(symbols)
    state = convert_state_dict(theirs, options, order, checkpoint)

    out_dir = os.path.abspath(out_dir)
    decoder_table = theirs.get("decoder.pos_emb.pe")
    max_target_positions = (
        int(decoder_table.reshape(-1, decoder_table.size(-1)).size(0)) if decoder_table is not None else 1024
    )
    args = model_arguments(options, out_dir, max_target_positions)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    model = HierarchicalTransformerModel.build_model(args, task)
    # fairseq's version buffers: without them load_state_dict "upgrades" the
    # decoder as a pre-2019 one and drops its final LayerNorm
    state.update({k: v for k, v in model.state_dict().items() if k.endswith(".version")})
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise HiersummImportError(
            f"{checkpoint}: the converted parameters do not fit hiertransformer_hiersumm (missing {missing[:8]}, "
            f"unexpected {unexpected[:8]})"
        )
    for key, value in model.state_dict().items():
        if key in state and value.shape != state[key].shape:
            raise HiersummImportError(
                f"{checkpoint}: {key} has shape {tuple(state[key].shape)}, expected {tuple(value.shape)}"
            )

    source = {
        "system": "hiersumm (Liu & Lapata 2019)",
        "checkpoint": os.path.basename(checkpoint),
        "sentencepiece": os.path.basename(spm_model),
        "fairseq_specials": {
            "<s>": processor.id_to_piece(order[0]),
            "<pad>": processor.id_to_piece(order[1]),
            "</s>": processor.id_to_piece(order[2]),
            "<unk>": processor.id_to_piece(order[3]),
        },
    }
    path = os.path.join(out_dir, CHECKPOINT_NAME)
    manifest = import_manifest(lowercase, source)
    with ImportOutput(out_dir, overwrite, "mdsfair-import hiersumm") as output:  # lock, stage, commit
        dictionary.save(output.path("dict.txt"))
        shutil.copyfile(spm_model, output.path(SPM_MODEL_NAME))
        model_state = model.state_dict()
        checkpoint_utils.torch_persistent_save(
            {
                "cfg": convert_namespace_to_omegaconf(args),
                "args": None,
                "model": model_state,
                "task_state": {RECORD_KEY: import_record(output.staging, out_dir, manifest, model_state)},
                # no optimizer state: `fairseq-train --restore-file` starts a fresh optimizer at update 0
                "optimizer_history": [
                    {
                        "criterion_name": "LabelSmoothedCrossEntropyCriterion",
                        "optimizer_name": "FairseqAdam",
                        "lr_scheduler_state": {"best": None},
                        "num_updates": 0,
                    }
                ],
                "extra_state": {
                    "train_iterator": {"epoch": 1, "iterations_in_epoch": 0, "shuffle": True, "version": 2}
                },
                "last_optimizer_state": None,
            },
            output.path(CHECKPOINT_NAME),
        )
        output.commit(manifest)
    logger.info(
        "%s: hiertransformer_hiersumm, d %d, %d local + %d global layers, %d decoder layers, %d types",
        path,
        options.embed_dim,
        options.num_local,
        options.num_global,
        options.decoder_layers,
        len(dictionary),
    )
    return path


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mdsfair-import hiersumm",
        description="Convert the Hierarchical Transformer checkpoint released with nlpyang/hiersumm (and its "
        "SentencePiece model) into a hiertransformer_hiersumm fairseq checkpoint, dict.txt and a "
        "data-bin manifest.",
    )
    parser.add_argument("checkpoint", metavar="CKPT", help="their checkpoint (model_step_*.pt: 'model', 'opt' entries)")
    parser.add_argument("spm_model", metavar="SPM_MODEL", help="their SentencePiece model (spm9998_3.model)")
    parser.add_argument(
        "out_dir", metavar="OUT_DIR", help="output directory (model.pt, dict.txt, spm.model, mdsfair.json)"
    )
    parser.add_argument(
        "--cased",
        action="store_true",
        help="record lowercase=false in the manifest; by default the hub lowercases raw text, as the authors' "
        "WikiSum data (and their gold summaries) are lowercased",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier import in OUT_DIR (only the files its mdsfair.json lists)",
    )
    return parser


def cli_main(argv: Optional[List[str]] = None) -> int:
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    args = get_parser().parse_args(argv)
    try:
        path = import_hiersumm(
            args.checkpoint, args.spm_model, args.out_dir, lowercase=not args.cased, overwrite=args.overwrite
        )
    except (HiersummImportError, ImportRefused) as e:
        print(f"mdsfair-import hiersumm: error: {e}", file=sys.stderr)
        return 1
    out_dir = os.path.dirname(path)
    lowercase = "" if args.cased else " --lowercase"
    print(
        f"wrote {path}\n"
        f"binarize clusters for it:\n"
        f"  mdsfair-preprocess --input-dir RAW_DIR --destdir DATA_BIN --spm-model {out_dir}/spm.model "
        f"--dict {out_dir}/dict.txt{lowercase}\n"
        f"generate (the authors tested on 40 paragraphs with beam 5 and 20-400 tokens):\n"
        f"  fairseq-generate DATA_BIN --user-dir mdsfair --task multidoc_summarization --path {path} "
        f"--max-paragraphs 40 --max-source-positions 8192 --beam 5 --min-len 20 --max-len-b 400"
    )
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
