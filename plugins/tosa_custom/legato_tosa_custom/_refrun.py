"""Run the TOSA reference model on DIR/module.tosa with DIR/in<i>.npy; write out<i>.npy.

Runs under the tosa-tools interpreter (its own venv), so it imports nothing from legato.
"""
import sys
from pathlib import Path

import numpy as np
import tosa_reference_model

folder, count = Path(sys.argv[1]), int(sys.argv[2])
inputs = [np.load(folder / f"in{i}.npy") for i in range(count)]
outputs, status = tosa_reference_model.run((folder / "module.tosa").read_bytes(), inputs)
if status != tosa_reference_model.GraphStatus.TOSA_VALID:
    sys.exit(f"reference model status {status.name}")
for i, array in enumerate(outputs):
    np.save(folder / f"out{i}.npy", array)
