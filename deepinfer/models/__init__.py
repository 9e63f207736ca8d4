"""Model architectures and checkpoint loading."""
