"""Every generating architecture against the golden outputs recorded by the
code before the models were rebuilt from shared components
(``tests/golden_outputs.py``, issue 31):

* the checkpoint written by that code loads through fairseq's loader;
* the teacher-forced log-probabilities of the float64 model equal the
  recorded ones within 64 float32 ulps of the largest (see
  :data:`LPROB_ULPS`);
* beam search (float64) gives the recorded best beam of every cluster.
"""

import os

import pytest
import torch

from tests import golden_outputs as golden
from tests.golden_outputs import ARCHITECTURES, load

#: The float64 model is not float64 throughout: fairseq's attention softmax
#: (``fairseq.utils.softmax``, ``dtype=torch.float32``) and its gelu
#: (``F.gelu(x.float())``) compute in float32, whose vectorized exp and erf
#: round differently on AMD and Intel CPUs. The log-probabilities therefore
#: agree to float32 round-off carried through the layers (measured: at most
#: 13 ulps of the largest log-probability, PageSum, on an AMD EPYC against
#: outputs recorded on an Intel Xeon), not to float64's. The tolerance is 64
#: float32 ulps of the largest recorded log-probability (about 1.5e-4 here),
#: as for the beams' float32 positional scores below: room for another CPU's
#: rounding, not for a changed computation (a wrong mask or scale moves
#: log-probabilities by far more).
LPROB_ULPS = 64


def test_every_generating_architecture_has_golden_outputs():
    missing = sorted(set(golden.golden_architectures()) - set(ARCHITECTURES) - NEW_ARCHITECTURES)
    assert not missing, f"architectures without golden outputs: {missing}"


#: Architectures registered after the golden outputs were recorded (they had no
#: earlier code to agree with; the contract suite covers them).
NEW_ARCHITECTURES = {
    "multidoc_bart_base",
    "multidoc_bart_large",
    "multidoc_bart_tiny",  # the model assembled from flags
    "primera_hierencdec",
    "primera_hierencdec_tiny",  # and the combinations (issue 31)
    "led_sparse",
    "led_sparse_tiny",
    "hierencdec_sparse",
    "hierencdec_sparse_tiny",
    "hat_bart_large",
    "hat_bart_tiny",  # HAT-BART (issue 43)
    "lobart_4k",
    "lobart_tiny",
    "lobart_4k_sparse",
    "lobart_4k_sparse_tiny",  # LoBART alone and with the sparse decoder (issue 43)
    "t5_v1_1_small",
    "t5_v1_1_base",
    "t5_v1_1_large",
    "t5_v1_1_tiny",  # T5 v1.1, checked against Hugging Face's instead (tests/test_t5.py; issue 44)
    "longt5_tglobal_base",
    "longt5_tglobal_large",
    "longt5_local_base",
    "longt5_tiny",
    "longt5_local_tiny",  # LongT5, checked against Hugging Face's instead (tests/test_longt5.py; issue 44)
    "pegasus_large",
    "pegasus_tiny",  # PEGASUS, checked against Hugging Face's instead (tests/test_pegasus.py; issue 44)
    "hepos_bart_large",
    "hepos_bart_tiny",  # HEPOS cross-attention (issue 43; oracle and authors' module: test_hepos_attention.py)
    "lsh_bart_large",
    "lsh_bart_tiny",
    "sinkhorn_bart_large",
    "sinkhorn_bart_tiny",  # HEPOS's encoders (issue 43; test_efficient_encoders.py)
    "tdmca",
    "tdmca_tiny",  # T-DMCA (issue 43; test_tdmca.py)
    "pointer_generator_see2017",
    "pointer_generator_tiny",
    "copy_transformer",
    "copy_transformer_tiny",  # the copy baselines (issue 45; test_pointer_generator.py)
}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_old_checkpoint_loads_and_gives_the_golden_outputs(arch):
    model, cfg, task = load(arch)
    assert cfg.model.arch == arch
    sample = torch.load(os.path.join(golden.GOLDEN_DIR, arch, "batch.pt"), weights_only=True)
    expected = torch.load(os.path.join(golden.GOLDEN_DIR, arch, "golden.pt"), weights_only=True)

    lprobs = golden.teacher_forced_lprobs(task, model, sample)
    assert lprobs.dtype == torch.float64 and lprobs.shape == expected["lprobs"].shape
    difference = (lprobs - expected["lprobs"]).abs().max().item()
    tolerance = LPROB_ULPS * torch.finfo(torch.float32).eps * max(1.0, expected["lprobs"].abs().max().item())
    assert difference <= tolerance, (
        f"{arch}: teacher-forced log-probabilities differ by {difference:.3g} (tolerance {tolerance:.3g})"
    )

    beams = golden.best_beams(task, model, cfg, sample)
    for row, (beam, recorded) in enumerate(zip(beams, expected["beams"])):
        assert beam["tokens"].tolist() == recorded["tokens"].tolist(), (arch, row)
        # positional scores are float32 whatever the model's dtype (fairseq's get_normalized_probs
        # casts to float32, as its attention's softmax does): a float32 sum over another number of
        # (masked) terms moves them by a few units of float32 round-off, a changed computation by far more
        scores_tolerance = (
            64
            * torch.finfo(recorded["positional_scores"].dtype).eps
            * max(1.0, recorded["positional_scores"].abs().max().item())
        )
        assert torch.allclose(
            beam["positional_scores"], recorded["positional_scores"], atol=scores_tolerance, rtol=0
        ), (arch, row)
