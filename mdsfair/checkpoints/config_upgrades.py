"""The model configurations of old checkpoints, brought up to date as they load.

fairseq's ``checkpoint_utils._upgrade_state_dict`` fills what an old
checkpoint's ``args`` lack (``max_source_positions`` from ``max_positions``,
``task`` as ``translation``, ...) before the model is built from them. A flag
that mdsfair adds later has the same problem where its default changes what
the saved weights compute: an old checkpoint's configuration lacks it, the
architecture fills today's default, and the tensors load into a different
model without a word. The code that owns such a flag registers an *upgrade*
with :func:`register_config_upgrade`: a function of the saved configuration
(a plain ``{key: value}`` of the keys the checkpoint holds) and the file's
path that returns the values to set, ``{}`` when the checkpoint needs none,
and logs what it set.

:func:`upgrade_model_config` runs every registered upgrade on each checkpoint
that ``load_checkpoint_to_cpu`` returns
(:func:`mdsfair.checkpoints.fairseq_wrappers.load_checked`): ``fairseq-generate``,
the hub, ``load_model_ensemble`` and the trainer's resume or fine-tune, whose
architecture check (:mod:`mdsfair.checkpoints.architecture_change`) then
compares the upgraded configuration with the run's. Values given by
``arg_overrides`` (``--model-overrides``, the hub's keywords) are in the
saved configuration by then, so they are kept.
"""

import argparse
from typing import Any, Callable, Dict, List, Mapping

#: An upgrade: (the saved model configuration, the checkpoint's path) -> the values to set.
ConfigUpgrade = Callable[[Mapping[str, Any], str], Dict[str, Any]]

_UPGRADES: List[ConfigUpgrade] = []


def register_config_upgrade(upgrade: ConfigUpgrade) -> ConfigUpgrade:
    """Decorator: run ``upgrade`` on every checkpoint loaded (module docstring)."""
    if upgrade not in _UPGRADES:
        _UPGRADES.append(upgrade)
    return upgrade


def _saved_keys(config) -> Dict[str, Any]:
    """The keys a model configuration holds (an ``argparse.Namespace`` or an
    omegaconf ``DictConfig``), as a plain dictionary."""
    if isinstance(config, argparse.Namespace):
        return dict(vars(config))
    from omegaconf import OmegaConf

    return dict(OmegaConf.to_container(config, resolve=False))


def _set(config, key: str, value: Any) -> None:
    if isinstance(config, argparse.Namespace):
        setattr(config, key, value)
        return
    from omegaconf import open_dict

    with open_dict(config):
        config[key] = value


def upgrade_model_config(state: Dict[str, Any], path: str) -> None:
    """Run the registered upgrades on the model configuration of ``state``
    (what fairseq's ``load_checkpoint_to_cpu`` returned for ``path``), in place.

    A checkpoint of fairseq 0.9-0.10's layout keeps its ``args`` as saved
    (plus the overrides) beside the ``cfg`` fairseq made from them, whose
    ``model`` fairseq filled with the model's ``add_args`` defaults: the
    upgrades read ``args`` and set their values in both. A checkpoint of
    fairseq 0.12's layout has ``cfg.model`` alone."""
    if not isinstance(state, dict) or not _UPGRADES:
        return
    cfg = state.get("cfg")
    model_config = cfg.get("model") if cfg is not None else None
    args = state.get("args")
    saved = args if args is not None else model_config
    if saved is None:
        return
    keys = _saved_keys(saved)
    for upgrade in _UPGRADES:
        values = upgrade(keys, path)
        for key, value in values.items():
            for config in (args, model_config):
                if config is not None:
                    _set(config, key, value)
        keys.update(values)
