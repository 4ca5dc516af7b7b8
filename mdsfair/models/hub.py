"""torch.hub declaration shared by the mdsfair model classes.

fairseq's own models declare what the hub can load on the model class
(``BARTModel.hub_models()`` and ``BARTModel.from_pretrained`` returning a
``BARTHubInterface``); mdsfair's do the same through :class:`MultiDocHubModel`:

* ``hub_description`` -- set in a model class's own body (not inherited), it
  makes the class's ``@register_model`` name a ``torch.hub`` entry point of
  ``hubconf.py`` with that one-line description
  (:func:`mdsfair.hub_interface.hub_entries` reads it from fairseq's
  ``MODEL_REGISTRY``);
* ``hub_models()`` -- fairseq's map of downloadable releases: empty, mdsfair
  publishes no checkpoints (they are trained or imported locally);
* ``from_pretrained(model_dir, checkpoint_file, data_name_or_path, **kwargs)``
  -- loads a checkpoint of this family into a
  :class:`mdsfair.hub_interface.MultiDocSummarizationHubInterface` (raw
  clusters in, summaries out), refusing a checkpoint of another model.
"""

from typing import Dict, Optional


class MultiDocHubModel:
    """Mixin (first base) of an mdsfair fairseq model with a hub entry point."""

    #: One line for ``torch.hub.help``; set in the class body to get an entry point.
    hub_description: Optional[str] = None

    @classmethod
    def hub_models(cls) -> Dict[str, str]:
        """fairseq's name -> URL map of released checkpoints: none."""
        return {}

    @classmethod
    def from_pretrained(
        cls, model_dir: str, checkpoint_file: str = "checkpoint_best.pt", data_name_or_path: str = ".", **kwargs
    ):
        """``model_dir/checkpoint_file`` as a
        :class:`~mdsfair.hub_interface.MultiDocSummarizationHubInterface`; the
        checkpoint must hold a model of this class (its ``@register_model``
        name). ``kwargs`` as for
        :meth:`MultiDocSummarizationHubInterface.from_pretrained`."""
        # The hub interface sits above the models (it needs tasks and
        # preprocessing), so it is imported when a model is loaded, as
        # fairseq's BARTModel.from_pretrained imports its hub interface.
        from mdsfair.hub_interface import load_hub_entry, registered_model_name

        name = registered_model_name(cls)
        if name is None or "hub_description" not in vars(cls):
            raise TypeError(f"{cls.__name__} declares no hub entry (hub_description) under a @register_model name")
        return load_hub_entry(
            name, model_dir, checkpoint_file=checkpoint_file, data_name_or_path=data_name_or_path, **kwargs
        )
