"""A local PostgreSQL for development, examples and tests."""
