"""A Hugging Face model named by a folder or by its Hub id, for the importers.

The importers of Hugging Face models (``mdsfair-import hf-bart``, ``hf-led``
and ``pagesum``'s ``HF_CONFIG``, each ``--tokenizer-dir``) read a model
folder. :func:`resolve_model_source` turns what the user named into that
folder:

* an existing folder is used as it is;
* ``ORG/NAME`` or ``ORG/NAME@REVISION`` (a branch, a tag or a commit), the
  id of a model on the Hugging Face Hub, is resolved with
  ``huggingface_hub.snapshot_download``: the files the importers read
  (:data:`CONFIG_FILES`, :data:`TOKENIZER_FILES` and one weight format) are
  fetched into the Hugging Face cache when the Hub can be reached, and found
  in the cache when it cannot or when ``HF_HUB_OFFLINE=1``.
  ``huggingface_hub`` reads ``HF_HOME`` / ``HF_HUB_CACHE`` for the cache
  folder and ``HF_HUB_OFFLINE`` itself;
* anything else is refused in one line, as is an id that is neither on the
  Hub nor in the cache (naming the cache folder searched and what to do).

The weight format. The importers read ``model.safetensors`` when the folder
has it and ``pytorch_model.bin`` otherwise, each single or sharded
(:func:`mdsfair.importers.hf_bart_files.load_hf_weights`). Many repositories
hold both (``facebook/bart-large``: about 1 GB each), so when the Hub answers,
its file list decides which one is fetched: the safetensors files when there
are any, else the PyTorch ones. Without the Hub the cached snapshot is used
as it is, and the importer says which weight file it lacks, if any.

The Hub's cache layout (``huggingface_hub.file_download``):
``models--ORG--NAME/blobs/<git blob sha1, or sha256 of an LFS file>``,
``snapshots/<commit>/<file>`` a relative link to ``../../blobs/<hash>``,
``refs/<branch>`` holding the commit; the commit of the snapshot folder is
recorded with the repository id in the import's ``mdsfair.json``
(``imported_from``).
"""

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from mdsfair.importers import ImportRefused
from mdsfair.importers.hf_bart_files import INDEX_SUFFIX

#: the model's configuration and generation defaults
CONFIG_FILES = ("config.json", "generation_config.json")
#: GPT-2 byte-level BPE (vocab.json, merges.txt) and the files that say which
#: tokens it adds (PRIMERA's <doc-sep>), as hf_bart_files and hf_led read them;
#: T5's SentencePiece model (spiece.model), as hf_t5 reads it
TOKENIZER_FILES = (
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
#: the weight files of each format, in the importers' order of preference:
#: single, sharded (``model-00001-of-00002.safetensors``) and the shard index
WEIGHT_PATTERNS = (
    ("*.safetensors", "model.safetensors" + INDEX_SUFFIX),
    ("pytorch_model*.bin", "pytorch_model.bin" + INDEX_SUFFIX),
)

# The Hub's rule for a repository id (huggingface_hub.utils.validate_repo_id),
# with the namespace required: ASCII letters, digits, "-", "_", ".", neither
# starting nor ending with "-" or ".", at most 96 characters a part.
_ID_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
MODEL_ID = re.compile(rf"({_ID_PART})/({_ID_PART})")


@dataclass(frozen=True)
class ModelSource:
    """The local folder of a model; ``repo_id`` and ``revision`` (the commit
    of the cached snapshot) when it was named by its Hub id."""

    path: str
    repo_id: Optional[str] = None
    revision: Optional[str] = None
    found: Optional[str] = None  # "local cache" or "Hugging Face Hub"

    def record(self) -> Dict[str, str]:
        """What an import records of where the model came from (none for a folder)."""
        return {} if self.repo_id is None else {"repo_id": self.repo_id, "revision": self.revision}

    def description(self) -> Optional[str]:
        """Where a model named by its id was found, for the user (None for a folder)."""
        if self.repo_id is None:
            return None
        return f"{self.repo_id}: {self.found} {self.path}"


def found_where(*sources: ModelSource) -> List[str]:
    """Where the sources named by their id were found, each once, for the
    summary of an import."""
    return list(dict.fromkeys(source.description() for source in sources if source.repo_id is not None))


def parse_model_id(source: str) -> Optional[Tuple[str, Optional[str]]]:
    """``(repo id, revision or None)`` of ``ORG/NAME[@REVISION]``; None for a
    string of another shape."""
    name, at, revision = source.partition("@")
    match = MODEL_ID.fullmatch(name)
    if match is None or (at and not revision.strip()) or any(".." in part or "--" in part for part in match.groups()):
        return None
    if name.endswith(".git"):
        return None
    return name, (revision if at else None)


def weight_patterns(repo_files: Sequence[str]) -> List[str]:
    """The patterns of the weight format the importers would read among
    ``repo_files`` (the Hub's file list): safetensors first; both when the
    list has neither, so that the importer names what is missing."""
    import fnmatch

    for patterns in WEIGHT_PATTERNS:
        if any(fnmatch.fnmatch(name, pattern) for name in repo_files for pattern in patterns):
            return list(patterns)
    return [pattern for patterns in WEIGHT_PATTERNS for pattern in patterns]


def _huggingface_hub(source: str):
    try:
        import huggingface_hub
    except ImportError:
        raise ImportRefused(
            f"{source}: naming a Hugging Face model needs the huggingface_hub package "
            '(pip install huggingface_hub, or pip install "mdsfair[hub]"); or pass the model\'s folder'
        ) from None
    return huggingface_hub


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def resolve_model_source(source: str, weights: bool = True) -> ModelSource:
    """The local folder of ``source``: a folder as it is, a Hub model id
    (``ORG/NAME[@REVISION]``) fetched into or found in the Hugging Face cache
    with the configuration and tokenizer files and, with ``weights``, one
    weight format. Refused (:class:`ImportRefused`, one line) when it is
    neither, or when the model is neither reachable nor cached."""
    if os.path.isdir(source):
        return ModelSource(source)
    if os.path.exists(source):
        raise ImportRefused(f"{source}: not a folder (expected a Hugging Face model folder or model id ORG/NAME)")
    parsed = parse_model_id(source)
    if parsed is None:
        raise ImportRefused(
            f"{source}: no such folder, and not a Hugging Face model id (ORG/NAME or ORG/NAME@REVISION)"
        )
    repo_id, revision = parsed
    hub = _huggingface_hub(source)
    from huggingface_hub import constants, errors

    patterns = list(CONFIG_FILES + TOKENIZER_FILES)
    unreachable = "HF_HUB_OFFLINE=1" if constants.HF_HUB_OFFLINE else None
    try:
        if unreachable is None:
            try:
                repo_files = hub.HfApi().list_repo_files(repo_id, revision=revision)
            except (errors.RepositoryNotFoundError, errors.RevisionNotFoundError):
                raise
            except Exception as error:  # no network, a proxy, the Hub down: the cache may still have it
                unreachable = f"the Hub could not be reached: {type(error).__name__}"
            else:
                patterns += weight_patterns(repo_files) if weights else []
        folder = hub.snapshot_download(
            repo_id, revision=revision, allow_patterns=patterns, local_files_only=unreachable is not None
        )
    except errors.RevisionNotFoundError:
        raise ImportRefused(f"{source}: the Hugging Face Hub has no revision {revision!r} of {repo_id}") from None
    except errors.RepositoryNotFoundError:
        raise ImportRefused(
            f"{source}: no such model on the Hugging Face Hub, or it is private or gated (log in with "
            "`hf auth login`); or pass the model's folder"
        ) from None
    except errors.LocalEntryNotFoundError as error:
        raise ImportRefused(cache_miss_message(source, repo_id, revision, unreachable, error)) from None
    except errors.HfHubHTTPError as error:
        raise ImportRefused(f"{source}: the Hugging Face Hub refused it: {_one_line(error)}") from None
    found = "local cache" if unreachable is not None else "Hugging Face Hub, cached in"
    return ModelSource(folder, repo_id, os.path.basename(os.path.normpath(folder)), found)


def cache_miss_message(
    source: str, repo_id: str, revision: Optional[str], unreachable: Optional[str], error: Exception
) -> str:
    """Why a model id was found neither on the Hub nor in the cache, the
    cache folder searched, and what to do: one line."""
    from huggingface_hub import constants

    command = f"`hf download {repo_id}" + (f" --revision {revision}`" if revision else "`")
    why = unreachable or _one_line(error.__cause__ or error)
    snapshot = getattr(error, "snapshot_path", None)  # huggingface_hub >= 2 names an incomplete snapshot
    if snapshot is not None:
        return (
            f"{source}: the copy in the Hugging Face cache {snapshot} is incomplete ({why}); complete it on a "
            f"connected machine with {command}, or pass the model's folder"
        )
    folder = "models--" + repo_id.replace("/", "--")
    searched = os.path.join(constants.HF_HUB_CACHE, folder)
    return (
        f"{source}: not a folder here, and not in the Hugging Face cache (searched {searched} for revision "
        f"{revision or constants.DEFAULT_REVISION}; {why}); download it on a connected machine with {command} "
        f"and copy its cache folder {folder} into {constants.HF_HUB_CACHE}, or pass the model's folder"
    )
