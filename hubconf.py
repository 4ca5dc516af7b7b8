"""torch.hub entry points of mdsfair, one per model family.

::

    summarizer = torch.hub.load(MDSFAIR_DIR, "hiertransformer", model_dir="checkpoints/",
                                data_name_or_path="data-bin/", source="local")
    summarizer.summarize([["first document ...", "second document ..."]])

Every entry of :func:`mdsfair.hub_interface.hub_entries` (the stock
``transformer`` and ``bart`` baselines, the generic ``summarizer``, and each
mdsfair model class that declares ``hub_description``) becomes a function here::

    name(model_dir, checkpoint_file="checkpoint_best.pt", data_name_or_path=".", **kwargs)

returning a :class:`~mdsfair.hub_interface.MultiDocSummarizationHubInterface`.
``torch.hub.list(MDSFAIR_DIR, source="local")`` lists them.
"""

import mdsfair as _mdsfair

_mdsfair.register()  # every model and its hub entry, the checkpoint checks (mdsfair.fairseq_patches)

from mdsfair.hub_interface import HUB_ENTRIES as _HUB_ENTRIES  # noqa: E402
from mdsfair.hub_interface import HubEntry as _HubEntry  # noqa: E402
from mdsfair.hub_interface import load_hub_entry as _load_hub_entry  # noqa: E402

# Module attributes that are callable and public are hub entry points, so the
# helpers above and below keep a leading underscore.

dependencies = ["torch", "fairseq", "sentencepiece"]


def _entry_point(entry: _HubEntry):
    def load(model_dir, checkpoint_file="checkpoint_best.pt", data_name_or_path=".", **kwargs):
        return _load_hub_entry(
            entry.name, model_dir, checkpoint_file=checkpoint_file, data_name_or_path=data_name_or_path, **kwargs
        )

    load.__name__ = load.__qualname__ = entry.name
    load.__doc__ = (
        f"{entry.description}.\n\n"
        "Args:\n"
        "    model_dir: directory of the checkpoint.\n"
        "    checkpoint_file: checkpoint file name in model_dir (several joined by os.pathsep: an ensemble).\n"
        "    data_name_or_path: the data-bin (mdsfair.json, dict.txt, subword model); relative to\n"
        "        model_dir when it starts with '.'.\n"
        "    kwargs: configuration overrides by name and side_data_args (see\n"
        "        MultiDocSummarizationHubInterface.from_pretrained).\n"
    )
    return load


for _name, _entry in _HUB_ENTRIES.items():
    globals()[_name] = _entry_point(_entry)
