"""GPUs: a catalog as data, and an NVML probe (the one module that imports pynvml)."""
