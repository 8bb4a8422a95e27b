"""The GGUF file: container, tensor layout, metadata -> Config, dequantized weights, tokenizers, where model files are."""
