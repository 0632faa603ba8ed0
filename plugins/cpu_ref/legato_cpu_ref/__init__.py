"""legato-cpu-ref: numpy reference kernels for every legato op."""
