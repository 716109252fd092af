"""A local S3-compatible object store for development, examples and tests."""
