"""Importers: checkpoints people already have -> mdsfair / fairseq checkpoints.

One console command per direction, the source kind first::

    mdsfair-import hf-bart HF_DIR OUT_DIR            # Hugging Face BART model directory or model id
    mdsfair-import pagesum STATE_DICT HF_CONFIG OUT_DIR --preset multinews
    mdsfair-import hiersumm CKPT SPM_MODEL OUT_DIR    # the Hierarchical Transformer's release
    mdsfair-export hf-bart CKPT DICT OUT_DIR         # a plain bart_* checkpoint -> Hugging Face

Each kind is a module here (``hf-bart`` -> :mod:`mdsfair.importers.hf_bart`)
with ``cli_main(argv)`` (and ``export_cli_main(argv)`` where it exports);
:mod:`mdsfair.importers.cli` dispatches without importing torch or fairseq
until a kind runs. fairseq's own released BART checkpoints (``bart.large``,
``bart.large.cnn``) need no import step: ``--restore-file`` reads them
(:mod:`mdsfair.importers.fairseq_bart` documents and tests that path).
"""


class ImportRefused(ValueError):
    """A source that cannot be converted faithfully; the message names the
    file and what in it is the problem."""
