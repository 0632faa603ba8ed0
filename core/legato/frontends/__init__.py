"""Importers that turn models from other frameworks into legato modules.

- `legato.frontends.onnx.load(path_or_model_proto, input_shapes=None, *, base_dir=None)`:
  ONNX models (needs the `onnx` package: `pip install legato[onnx]`); external tensor data
  is read from inside `base_dir` (for a path, the file's directory).
- `legato.frontends.torch.load(module, example_inputs)`: PyTorch modules via torch.export;
  `legato.frontends.torch.dynamo` is the `torch.compile(backend="legato")` backend.
- `legato.frontends.common`: what both importers write the same way (constant folding,
  index arithmetic, convolutions, resizing, determinants, shifts). Neither importer imports
  the other.

Each importer lists its converter modules once, in its `converters` module. Each importer is
imported on demand, so the core never needs onnx or torch.
"""
