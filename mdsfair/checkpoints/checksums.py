"""The checksum of a model state: one SHA-256 per tensor, over its dtype,
shape and bytes as a fairseq checkpoint stores them (float16 / bfloat16 as
float32, as fairseq's ``move_to_cpu`` writes them), so that a changed tensor
can be named; and its verification when a checkpoint loads
(``MDSFAIR_VERIFY_CHECKPOINTS=0`` turns that off). The package docstring of
:mod:`mdsfair.checkpoints` gives the measured cost.
"""

import concurrent.futures
import hashlib
import os
from typing import Any, Dict

#: Environment variable: ``0`` turns checksum verification off.
VERIFY_ENV = "MDSFAIR_VERIFY_CHECKPOINTS"


class CheckpointIntegrityError(RuntimeError):
    """Model tensors that differ from the checksum saved with them."""


def tensor_digest(tensor) -> str:
    """SHA-256 of a tensor's dtype, shape and bytes in the form a fairseq
    checkpoint stores it (float16 / bfloat16 as float32, on the CPU)."""
    import torch

    tensor = tensor.detach()
    if tensor.dtype in (torch.float16, torch.bfloat16):
        tensor = tensor.float()
    tensor = tensor.cpu().contiguous()
    digest = hashlib.sha256(f"{tensor.dtype}:{tuple(tensor.shape)}:".encode("ascii"))
    if tensor.numel():
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def model_checksum(model_state: Dict[str, Any]) -> Dict[str, Any]:
    """Per-tensor SHA-256 of a model state dict (non-tensor entries skipped;
    tensors that share memory are hashed once). Tensors are hashed on up to
    8 threads (hashlib releases the GIL)."""
    import torch

    unique, key_of = {}, {}
    for name, value in model_state.items():
        if torch.is_tensor(value):
            key = (
                (
                    value.device,
                    value.data_ptr(),
                    value.storage_offset(),
                    tuple(value.shape),
                    value.stride(),
                    value.dtype,
                )
                if value.numel()
                else ("empty", name)
            )
            unique.setdefault(key, value)
            key_of[name] = key
    workers = max(1, min(8, os.cpu_count() or 1, len(unique)))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        digest_of = dict(zip(unique, pool.map(tensor_digest, unique.values())))
    return {"algorithm": "sha256", "tensors": {name: digest_of[key] for name, key in key_of.items()}}


def verify_model_checksum(model_state: Dict[str, Any], checksum: Dict[str, Any], path: str) -> None:
    """Raise :class:`CheckpointIntegrityError` naming ``path`` and the tensors
    whose content differs from ``checksum`` (or that are missing / extra)."""
    if checksum.get("algorithm") != "sha256":
        raise CheckpointIntegrityError(f"{path}: unknown checksum algorithm {checksum.get('algorithm')!r}")
    expected = checksum["tensors"]
    actual = model_checksum(model_state)["tensors"]
    changed = sorted(name for name in expected if name in actual and actual[name] != expected[name])
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    if not (changed or missing or extra):
        return
    problems = []
    for what, names in (("differ", changed), ("are missing", missing), ("were not saved", extra)):
        if names:
            shown = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
            problems.append(f"{len(names)} of {len(expected)} tensors {what}: {shown}")
    raise CheckpointIntegrityError(
        f"{path}: the model weights do not match the checksum saved with them ({'; '.join(problems)}). "
        "The file is corrupted (a disk or transfer error, a partial copy). If the weights were changed on "
        "purpose (averaging, surgery), record the new checksum with `python -m mdsfair.checkpoints stamp "
        f"{path}`, or set {VERIFY_ENV}=0 to skip verification."
    )


def verification_enabled() -> bool:
    return os.environ.get(VERIFY_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
