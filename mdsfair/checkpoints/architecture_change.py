"""What may change between a checkpoint's model configuration and the run
that resumes from it, or fine-tunes it.

A changed architecture flag that keeps every tensor's shape
(``--decoder-attention-heads``, ``--activation-fn``,
``--encoder-normalize-before``, ``--locality``, ...) would load the old
weights into a different model: :func:`check_architecture` refuses it with
:class:`ArchitectureChangeError`, naming each flag with its old and new
value, unless the task's ``--allow-arch-change`` is set (each difference is
then logged). A *fine-tune* (the optimizer is reset) may change ``--arch``
and flags the checkpoint's configuration does not have; every flag both
configurations have must agree as for a resume. Non-architecture values
(:data:`NON_ARCHITECTURE_KEYS`) may always change and are logged. Only
mdsfair tasks are checked (the flag is theirs).
"""

import argparse
import functools
import logging
from typing import Any, Dict, List, Optional

logger = logging.getLogger(__name__)


class ArchitectureChangeError(RuntimeError):
    """Resuming from a checkpoint whose model configuration differs from this run's."""


#: Model-configuration keys that never change what the saved weights mean:
#: regularization and memory settings, position budgets (a learned table of
#: another size does not load; sinusoidal positions have no weights; the
#: tiling of a shorter table), and the sparse decoder's sentence selection. Any key containing
#: ``dropout`` or ``layerdrop`` is one too.
NON_ARCHITECTURE_KEYS = frozenset(
    {
        "checkpoint_activations",
        "offload_activations",
        "min_params_to_wrap",
        "max_source_positions",
        "max_target_positions",
        "quant_noise_pq",
        "quant_noise_pq_block_size",
        "quant_noise_scalar",
        "tpu",
        "position_tiling",
        # the sparse decoder's sentence selection: changed between its training stages (README: KL-only with
        # --top-r 0, then --top-r 5 --sentence-selection approx) and by --model-overrides at generation
        "top_r",
        "sentence_selection",
        "mix_decay_updates",
        "share_selection_across_beams",
        "sparse_generation_path",
    }
)


def is_architecture_key(key: str) -> bool:
    return not ("dropout" in key or "layerdrop" in key or key in NON_ARCHITECTURE_KEYS or key.startswith("_"))


@functools.lru_cache(maxsize=None)
def _model_keys(model_class) -> frozenset:
    """The configuration keys a fairseq model class declares (its
    ``add_args``, which for dataclass models lists the dataclass)."""
    parser = argparse.ArgumentParser(add_help=False)
    try:
        model_class.add_args(parser)
    except Exception:  # noqa: BLE001 (a model whose add_args cannot run alone: compare nothing but --arch)
        return frozenset()
    return frozenset(action.dest for action in parser._actions if action.dest != "help")


def _as_plain_dict(model_cfg) -> Dict[str, Any]:
    if model_cfg is None:
        return {}
    if isinstance(model_cfg, argparse.Namespace):
        return dict(vars(model_cfg))
    if isinstance(model_cfg, dict):
        return dict(model_cfg)
    from omegaconf import DictConfig, OmegaConf

    if isinstance(model_cfg, DictConfig):
        try:
            return OmegaConf.to_container(model_cfg, resolve=True)
        except Exception:  # noqa: BLE001 (an interpolation that does not resolve outside its run)
            return OmegaConf.to_container(model_cfg, resolve=False)
    return {}


def _normalized(value):
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    try:
        from omegaconf import ListConfig

        if isinstance(value, ListConfig):
            return [_normalized(v) for v in value]
    except ImportError:  # pragma: no cover
        pass
    return value


def _arch_name(config: Dict[str, Any]) -> Optional[str]:
    return config.get("arch") or config.get("_name")


def architecture_differences(old_cfg, new_cfg, fine_tune: bool) -> Dict[str, List[Any]]:
    """``{key: [old, new]}`` of every model-configuration value that differs
    between a checkpoint's (``old_cfg``) and this run's (``new_cfg``), for the
    keys the new model class declares and both configurations have
    (``--arch`` too, except in a fine-tune). Non-architecture keys are
    included; :func:`is_architecture_key` tells them apart."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    old, new = _as_plain_dict(old_cfg), _as_plain_dict(new_cfg)
    differences: Dict[str, List[Any]] = {}
    old_arch, new_arch = _arch_name(old), _arch_name(new)
    if not fine_tune and old_arch and new_arch and old_arch != new_arch:
        differences["arch"] = [old_arch, new_arch]
    model_class = ARCH_MODEL_REGISTRY.get(new_arch)
    keys = _model_keys(model_class) if model_class is not None else frozenset()
    for key in sorted(keys):
        if key in ("arch", "_name") or key not in old or key not in new:
            continue
        if _normalized(old[key]) != _normalized(new[key]):
            differences[key] = [old[key], new[key]]
    return differences


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def check_architecture(state: Dict[str, Any], path: str, context: Dict[str, Any]) -> None:
    """Compare a checkpoint's model configuration with the run that resumes
    from it (module docstring); raise :class:`ArchitectureChangeError` or log."""
    trainer = context["trainer"]
    task_cfg = getattr(getattr(trainer, "task", None), "cfg", None)
    allow = getattr(task_cfg, "allow_arch_change", None)
    if allow is None:  # not an mdsfair task: fairseq's behaviour
        return
    saved = state.get("cfg")
    old_model = saved.get("model") if hasattr(saved, "get") else None
    if old_model is None:
        return
    fine_tune = context["fine_tune"]
    differences = architecture_differences(old_model, trainer.cfg.model, fine_tune)
    what = "fine-tuning from" if fine_tune else "resuming from"
    allowed = {key: values for key, values in differences.items() if not is_architecture_key(key)}
    for key, (old, new) in allowed.items():
        logger.info(
            "%s %s: %s was %r in the checkpoint, %r now (not an architecture flag)", what, path, _flag(key), old, new
        )
    changed = {key: values for key, values in differences.items() if is_architecture_key(key)}
    if not changed:
        return
    listed = "; ".join(f"{_flag(key)} {old!r} in the checkpoint, {new!r} now" for key, (old, new) in changed.items())
    if allow:
        for key, (old, new) in changed.items():
            logger.warning("--allow-arch-change: %s %s with %s changed from %r to %r", what, path, _flag(key), old, new)
        return
    raise ArchitectureChangeError(
        f"{what} checkpoint {path}: this run's model differs from the one that saved it ({listed}). The tensors "
        "have the same shapes, so its weights would load silently into a different model. Give the checkpoint's "
        "values again (or start in a new --save-dir), or pass --allow-arch-change if you mean to change the "
        "architecture" + ("" if fine_tune else " (a fine-tune with --reset-optimizer may also change --arch)")
    )
