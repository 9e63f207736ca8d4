"""Request lifecycle: scheduling, KV-cache management and output processing."""
