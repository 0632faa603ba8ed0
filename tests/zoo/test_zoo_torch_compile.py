"""Hugging Face models of the public zoo through `torch.compile(backend="legato")`, matched
with eager (1e-4 relative to eager's largest magnitude) on cpu_ref and c_kernels.

`make test` runs GPT-2 on c_kernels (dynamo's trace and torch.export take several seconds
per model); `make zoo` runs every pair listed here.
"""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.zoo import models  # noqa: E402

pytestmark = pytest.mark.zoo

# BERT (of the wider zoo) and every core model: encoders, decoders, speech, vision
# transformers and CNNs; each runs on legato whole (no op left in PyTorch)
NAMES = ("bert", *models.CORE)
QUICK = {("gpt2", "c_kernels")}
PAIRS = [pytest.param(name, backend, id=f"{name}-{backend}",
                      marks=() if (name, backend) in QUICK else pytest.mark.zoo_full)
         for name in NAMES for backend in ("cpu_ref", "c_kernels")]


@pytest.mark.parametrize("name,backend", PAIRS)
def test_torch_compile_matches_eager(name, backend, caplog):
    module, inputs = models.build(name)
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="legato", options={"backend": backend})
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="legato.dynamo"):
        want, got = module(*inputs), compiled(*inputs)
    error = float((got - want).abs().max() / want.abs().max())
    torch._dynamo.reset()
    assert error < 1e-4, f"{name} on {backend}: max error {error:.2e} relative to eager"
    assert not caplog.records, f"{name}: not all on legato: {caplog.text}"
