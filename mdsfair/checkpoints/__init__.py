"""Checkpoint integrity and provenance: which data a model was trained on, and
whether its weights are the ones that were saved.

One module per job:

* :mod:`~mdsfair.checkpoints.checksums`: the per-tensor SHA-256 of a model
  state and its verification;
* :mod:`~mdsfair.checkpoints.record`: the record a checkpoint carries (its
  keys, :func:`~mdsfair.checkpoints.record.make_record`);
* :mod:`~mdsfair.checkpoints.fingerprints`: the data fingerprint (dictionary,
  subword model) and the check of it when a model loads its weights;
* :mod:`~mdsfair.checkpoints.architecture_change`: what may change between a
  checkpoint's model configuration and the run that resumes from it;
* :mod:`~mdsfair.checkpoints.config_upgrades`: the values an old checkpoint's
  model configuration lacks, set as it loads (a flag added later whose
  default would change what its weights compute);
* :mod:`~mdsfair.checkpoints.diagnosis`: why a file cannot be read (empty,
  Git LFS pointer, missing, truncated, not a checkpoint);
* :mod:`~mdsfair.checkpoints.fairseq_wrappers`: the functions that
  :mod:`mdsfair.fairseq_patches` installs in fairseq's place;
* :mod:`~mdsfair.checkpoints.stamping`: ``verify`` and ``stamp`` of a file,
  which ``python -m mdsfair.checkpoints verify|stamp FILE...``
  (:mod:`mdsfair.checkpoints.__main__`) runs.

What a checkpoint records
-------------------------
A checkpoint that ``fairseq-train`` writes with an mdsfair task
(``multidoc_summarization`` and its subclasses) carries, in fairseq's
``task_state`` (what :meth:`FairseqTask.state_dict` returns; the trainer stores
it in every checkpoint), a record under
:data:`~mdsfair.checkpoints.record.RECORD_KEY`::

    {"version": 1,
     "data": {"data_bins": [absolute data-bin paths],
              "dictionary": {"size": 8004, "sha256": "..."},       # symbols in id order
              "subword": {"type": "sentencepiece", "files": {"spm.model": "<sha256>"}}},
     "model_checksum": {"algorithm": "sha256", "tensors": {"<name>": "<sha256>", ...}}}

The checksum is one SHA-256 per tensor of the model state, over its dtype,
shape and bytes as the file stores them (float16 / bfloat16 as float32, as
fairseq's ``move_to_cpu`` writes them), so a changed tensor can be named.

What loading checks
-------------------
Every checkpoint fairseq loads goes through
``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` (``fairseq-generate``, the
hub, ``--restore-file`` / ``--finetune-from-model``, resuming). Registering
mdsfair (:func:`mdsfair.fairseq_patches.patch_load_checkpoint_to_cpu`) wraps it
with :func:`~mdsfair.checkpoints.fairseq_wrappers.load_checked`:

* a file that is empty, a Git LFS pointer, or that torch cannot read
  (truncated, not a checkpoint) raises
  :class:`~mdsfair.checkpoints.diagnosis.CheckpointFileError` naming the file
  and the likely cause, instead of a bare ``EOFError`` / ``invalid load key``;
* a checkpoint with a record has its model tensors verified against the
  checksum; a difference raises
  :class:`~mdsfair.checkpoints.checksums.CheckpointIntegrityError` naming the
  file and the tensors. ``MDSFAIR_VERIFY_CHECKPOINTS=0`` turns verification
  off; :func:`~mdsfair.checkpoints.stamping.stamp` (``python -m
  mdsfair.checkpoints stamp FILE``) records a new checksum after a deliberate
  edit of the weights (e.g. averaging);
* the record's data fingerprint travels with the model state (in its torch
  ``_metadata`` for the root module) to the model's ``load_state_dict``, where
  the task that built the model compares it with its own data-bin
  (:func:`~mdsfair.checkpoints.fingerprints.dictionary_check_hook`): a
  different dictionary or subword model raises
  :class:`~mdsfair.checkpoints.fingerprints.DictionaryMismatchError` naming
  both data-bins unless ``--allow-dictionary-mismatch`` is set.

* a checkpoint saved before a flag existed whose default changes what its
  weights compute gets the value it was trained with
  (:func:`~mdsfair.checkpoints.config_upgrades.upgrade_model_config`: the
  upgrades the flags' owners register, each logging what it set);

* resuming training (``fairseq-train`` / ``mdsfair-train`` with
  ``--restore-file``, or ``checkpoint_last.pt`` in ``--save-dir``) compares the
  checkpoint's model configuration with this run's
  (:func:`~mdsfair.checkpoints.architecture_change.architecture_differences`,
  from the wrapped ``Trainer.load_checkpoint``): a changed architecture flag
  that keeps every tensor's shape (``--decoder-attention-heads``,
  ``--activation-fn``, ``--encoder-normalize-before``, ``--locality``, ...)
  would load the old weights into a different model, so it raises
  :class:`~mdsfair.checkpoints.architecture_change.ArchitectureChangeError`
  naming each flag with its old and new value, unless the task's
  ``--allow-arch-change`` is set (each difference is then logged). A
  *fine-tune* (the optimizer is reset: ``--reset-optimizer``, or
  ``--finetune-from-model``'s first start) may change ``--arch`` (a BART
  release into ``hierencdec_bart_large``, the README's transfers) and flags
  the checkpoint's configuration does not have; every flag both
  configurations have must agree as for a resume. Non-architecture values
  (:data:`~mdsfair.checkpoints.architecture_change.NON_ARCHITECTURE_KEYS`:
  dropouts, layer drop, activation checkpointing, position budgets,
  sparse-selection schedules) may always change and are logged. Only mdsfair
  tasks are checked (the flag is theirs).

Checkpoints without a record (stock fairseq / BART releases, older mdsfair
checkpoints) load as before. Every load here runs with torch's
``weights_only=True`` and only the globals of
:mod:`mdsfair.checkpoint_loading` allowed, for that load alone.

Cost
----
Hashing reads every byte of the model state once more (optimizer state is
not hashed), on up to 8 threads. Measured on the 2-core CPU machine of the
tests while it was shared (load average 5.6): a bart_base-sized state (138 M
parameters, 0.55 GB in float32) took 1.4-2.0 s to checksum, against 7.5-8.3 s
for ``torch.save`` of the same state; that is the added time at every save
and every load, proportionally more for bart_large (0.4 B parameters).
``--no-checkpoint-checksum`` (task option) skips it at save time;
``MDSFAIR_VERIFY_CHECKPOINTS=0`` at load time.
"""
