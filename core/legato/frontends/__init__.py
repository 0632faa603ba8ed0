"""Importers that turn models from other frameworks into legato modules.

- `legato.frontends.onnx.load(path_or_model_proto, input_shapes=None)`: ONNX models
  (needs the `onnx` package: `pip install legato[onnx]`).
- `legato.frontends.torch.load(module, example_inputs)`: PyTorch modules via torch.export.

Each importer is imported on demand, so the core never needs onnx or torch.
"""
