"""Runnable examples built on the runtime."""
