"""Take a trained model elsewhere: three formats, one module each.

- `hf`    a Hugging Face GPT-2 folder (`tinyformer export hf RUN OUT`): `transformers` loads it
- `page`  one self-contained HTML file (`tinyformer export page RUN OUT.html`): the model runs in any browser,
          offline, with the playground's generate, distribution and attention views
- `onnx`  ONNX graphs (`tinyformer export onnx RUN OUT`): the language model, or the reversal encoder-decoder
          as an encoder and a one-step decoder, checked against onnxruntime
"""

from __future__ import annotations

from tinyformer.export.hf import check_target, export_hf

__all__ = ["check_target", "export_hf"]
