"""What the ONNX and torch importers write the same way: constant folding of shape arithmetic
at import (fold), flat indices, row scatters and one-hot encoding (indexing), einsum
contraction (einsum), determinants (linalg), N-d and transposed convolutions (conv_nd),
resizing (resample) and integer bit shifts (shifts). Neither importer package imports the
other; both import from here."""
