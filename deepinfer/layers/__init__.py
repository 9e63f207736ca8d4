"""Model building blocks shared by all architectures."""
