"""Runs the model: device buffers, batch preparation, forward and sampling."""
