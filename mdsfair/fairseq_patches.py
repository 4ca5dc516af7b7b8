"""Every change mdsfair makes to fairseq's own code, one function per patch.

Written against fairseq **0.12.3** (the ``ve-fairseq`` 0.12.3 wheel,
:data:`FAIRSEQ_VERSION`). :func:`apply_fairseq_patches` applies them all; it is
called by :func:`mdsfair.register`, never at import time, and each patch is
idempotent. Nothing else in mdsfair assigns to a fairseq attribute
(``tests/test_layering.py`` checks that no other module does).

Patches
-------
1. ``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` is wrapped by
   :func:`mdsfair.checkpoints.fairseq_wrappers.load_checked` (:func:`patch_load_checkpoint_to_cpu`).
   *Why:* every checkpoint fairseq loads for an mdsfair run goes through this
   one function (``fairseq-generate --path``, ``fairseq-train --restore-file`` /
   ``--finetune-from-model`` and resuming, ``hub_utils.from_pretrained``), and
   fairseq offers no hook there: the checks of :mod:`mdsfair.checkpoints`
   (empty / truncated / Git LFS pointer files named with their cause, weights
   verified against the checksum saved with them, the training data fingerprint
   handed to the model's ``load_state_dict``) and the ``weights_only`` allow-list
   of :mod:`mdsfair.checkpoint_loading` can only run there. Callers inside
   fairseq look the function up on the module at call time
   (``checkpoint_utils.load_checkpoint_to_cpu(...)``), so replacing the module
   attribute reaches all of them.
2. ``fairseq.trainer.Trainer.load_checkpoint`` is wrapped by
   :func:`mdsfair.checkpoints.fairseq_wrappers.trainer_load_checked`
   (:func:`patch_trainer_load_checkpoint`).
   *Why:* resuming (``--restore-file`` or ``checkpoint_last.pt``) is the one
   place that knows both the checkpoint's model config and the new one, and
   whether the optimizer is reset (a fine-tune): a changed architecture flag
   that keeps tensor shapes is refused there (``--allow-arch-change``).
3. ``fairseq.file_io.PathManager.copy`` becomes
   :func:`mdsfair.checkpoints.fairseq_wrappers.atomic_copy` for local files, and
   ``checkpoint_utils.torch_persistent_save`` removes its ``FILE.tmp`` when
   interrupted (:func:`patch_atomic_checkpoint_writes`).
   *Why:* fairseq makes ``checkpoint_last.pt`` / ``checkpoint_best.pt`` with
   ``shutil.copyfile`` onto the old file, which an error or Ctrl-C leaves cut
   short; the temporary-file-then-rename copy leaves the old checkpoint whole.
4. ``fairseq.options.parse_args_and_arch`` keeps ``tpu`` False for ``--bf16``,
   only inside :func:`bf16_kept_on_cuda`, which ``mdsfair-train`` enters for a
   command that trains on a GPU (:func:`mdsfair.cli.bf16_on_cuda`); not applied
   by :func:`apply_fairseq_patches`. *Why:* fairseq's ``options.py`` makes
   every ``--bf16`` run a TPU run, although its trainer trains in bfloat16 on a
   GPU when ``tpu`` is False (model and batches cast, ``FP16Optimizer`` without
   a loss scaler; ``tests/test_bf16_training.py``).
5. ``fairseq_cli.generate.main`` writes ``--results-path``'s
   ``generate-SUBSET.txt`` whole or not at all (:func:`results_written_whole`),
   only inside :func:`generate_results_written_whole`, which ``mdsfair-generate``
   enters (:func:`mdsfair.cli.generate_main`); not applied by
   :func:`apply_fairseq_patches`. *Why:* fairseq's ``main`` opens the results
   file at the start and writes hypotheses as they come, so an error or Ctrl-C
   left a cut file over the previous one, and fairseq offers no hook for where
   it writes; ``cli_main`` calls ``main`` through the module attribute, so
   replacing it for the one command reaches that call.
"""

import contextlib
import functools
from typing import Callable

#: The fairseq release these patches were written and tested against.
FAIRSEQ_VERSION = "0.12.3"

#: Attribute set on a wrapper this module installed (so it is installed once).
PATCHED_MARKER = "__mdsfair_checked__"


def patch_load_checkpoint_to_cpu() -> None:
    """Patch 1 (module docstring): wrap ``checkpoint_utils.load_checkpoint_to_cpu``
    with :func:`mdsfair.checkpoints.fairseq_wrappers.load_checked` (once)."""
    from fairseq import checkpoint_utils

    from mdsfair.checkpoints.fairseq_wrappers import load_checked

    current = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(current, PATCHED_MARKER, False):
        return

    @functools.wraps(current)
    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        return load_checked(current, path, arg_overrides, load_on_all_ranks)

    setattr(load_checkpoint_to_cpu, PATCHED_MARKER, True)
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu


def patch_trainer_load_checkpoint() -> None:
    """Patch 2 (module docstring): wrap ``Trainer.load_checkpoint`` with
    :func:`mdsfair.checkpoints.fairseq_wrappers.trainer_load_checked` (once)."""
    from fairseq.trainer import Trainer

    from mdsfair.checkpoints.fairseq_wrappers import trainer_load_checked

    trainer_load = Trainer.load_checkpoint
    if getattr(trainer_load, PATCHED_MARKER, False):
        return

    @functools.wraps(trainer_load)
    def load_checkpoint(self, filename, *args, **kwargs):
        return trainer_load_checked(trainer_load, self, filename, *args, **kwargs)

    setattr(load_checkpoint, PATCHED_MARKER, True)
    Trainer.load_checkpoint = load_checkpoint


def patch_atomic_checkpoint_writes() -> None:
    """Patch 3 (module docstring): ``PathManager.copy`` atomic for local files,
    and ``torch_persistent_save`` removes its ``FILE.tmp`` on an error (once each)."""
    import os

    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    from mdsfair.checkpoints.fairseq_wrappers import atomic_copy, is_local_path

    copy = PathManager.copy
    if not getattr(copy, PATCHED_MARKER, False):

        def atomic(src_path, dst_path, overwrite=False):
            return atomic_copy(copy, src_path, dst_path, overwrite)

        setattr(atomic, PATCHED_MARKER, True)
        PathManager.copy = staticmethod(atomic)
    save = checkpoint_utils.torch_persistent_save
    if not getattr(save, PATCHED_MARKER, False):

        @functools.wraps(save)
        def torch_persistent_save(obj, filename, *args, **kwargs):
            try:
                return save(obj, filename, *args, **kwargs)
            except BaseException:
                if is_local_path(filename) and os.path.exists(filename + ".tmp"):
                    os.remove(filename + ".tmp")
                raise

        setattr(torch_persistent_save, PATCHED_MARKER, True)
        checkpoint_utils.torch_persistent_save = torch_persistent_save


def apply_fairseq_patches() -> None:
    """Apply every patch of this module (idempotent)."""
    patch_load_checkpoint_to_cpu()
    patch_trainer_load_checkpoint()
    patch_atomic_checkpoint_writes()


@contextlib.contextmanager
def bf16_kept_on_cuda():
    """Patch 4 (module docstring), for the duration of the ``with`` block:
    ``--bf16`` parses to ``tpu=False``."""
    from fairseq import options

    original = options.parse_args_and_arch

    def parse_args_and_arch(*args, **kwargs):
        parsed = original(*args, **kwargs)
        if getattr(parsed, "bf16", False):
            parsed.tpu = False
        return parsed

    options.parse_args_and_arch = parse_args_and_arch
    try:
        yield
    finally:
        options.parse_args_and_arch = original


def results_written_whole(original_main: Callable):
    """fairseq-generate's ``main`` writing ``--results-path``'s
    ``generate-SUBSET.txt`` whole or not at all: fairseq's own main writes it
    into a hidden folder inside the results path, and the file is moved over
    the old one (``os.replace``) only when generation has finished. An error
    or Ctrl-C removes the folder (and a results path this run created) and
    leaves an earlier file as it was. Without ``--results-path``, fairseq's
    main unchanged (hypotheses go to stdout)."""
    import os
    import shutil
    import tempfile

    def main(cfg):
        from argparse import Namespace

        if isinstance(cfg, Namespace):
            from fairseq.dataclass.utils import convert_namespace_to_omegaconf

            cfg = convert_namespace_to_omegaconf(cfg)
        results = cfg.common_eval.results_path
        if results is None:
            return original_main(cfg)
        created = not os.path.isdir(results)
        os.makedirs(results, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".mdsfair-generate-", dir=results)
        name = f"generate-{cfg.dataset.gen_subset}.txt"
        cfg.common_eval.results_path = staging
        finished = False
        try:
            value = original_main(cfg)
            os.replace(os.path.join(staging, name), os.path.join(results, name))
            finished = True
            return value
        finally:
            cfg.common_eval.results_path = results
            shutil.rmtree(staging, ignore_errors=True)
            if created and not finished and not os.listdir(results):
                os.rmdir(results)

    return main


@contextlib.contextmanager
def generate_results_written_whole():
    """Patch 5 (module docstring), for the duration of the ``with`` block:
    ``fairseq_cli.generate.main`` is :func:`results_written_whole` of itself."""
    from fairseq_cli import generate

    original = generate.main
    generate.main = results_written_whole(original)
    try:
        yield
    finally:
        generate.main = original
