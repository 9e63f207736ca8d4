"""Weight quantization formats."""
