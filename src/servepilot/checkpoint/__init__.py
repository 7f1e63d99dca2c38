"""Checkpoint readers: config.json, quant configs, safetensors and GGUF headers → ModelSpec."""
