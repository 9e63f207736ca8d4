"""Turning conversations into prompts (chat templates) and protocol messages into conversations."""
