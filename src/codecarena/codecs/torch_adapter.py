"""What the PyTorch families' adapters share: the loaded model for variants and the determinism
doctor, the encoder-side/decoder-side model facts, and residual-VQ codes in a payload stream."""

from __future__ import annotations

import numpy as np
import torch

from codecarena.codecs.base import Adapter, Encoded
from codecarena.codecs.torch_weights import parameter_stats
from codecarena.payload import CodeStream, Payload


class TorchAdapter(Adapter):
    latent_module = "encoder"
    model: torch.nn.Module

    def torch_model(self) -> torch.nn.Module:
        return self.model

    def side_modules(self) -> tuple[tuple[torch.nn.Module, ...], tuple[torch.nn.Module, ...]]:
        """The modules each side must ship: encoder or decoder, plus the quantizer."""
        return (self.model.encoder, self.model.quantizer), (self.model.decoder, self.model.quantizer)

    def side_facts(self) -> dict[str, int]:
        """Parameters and tensor bytes of each side's modules."""
        encoder_modules, decoder_modules = self.side_modules()
        encoder, decoder = parameter_stats(*encoder_modules), parameter_stats(*decoder_modules)
        return {"encoder_parameters": encoder["parameters"], "encoder_model_bytes": encoder["tensor_bytes"],
                "decoder_parameters": decoder["parameters"], "decoder_model_bytes": decoder["tensor_bytes"]}


def rvq_encoded(codes: torch.Tensor, bits: int) -> Encoded:
    """Codes of shape (1, quantizers, frames) as one stream packed at the codebook's bit width."""
    values = codes[0].numpy().astype(np.uint64)  # quantizers x frames
    return Encoded(streams=(CodeStream("codes", bits, tuple(values.shape), values.reshape(-1)),),
                   side_info={}, facts={"frames": int(values.shape[1]), "quantizers": int(values.shape[0])})


def rvq_codes(payload: Payload) -> torch.Tensor:
    """The payload's code stream back as a (1, quantizers, frames) int64 tensor."""
    stream = payload.code_stream("codes")
    return torch.from_numpy(stream.values.astype(np.int64).reshape(stream.shape))[None]
