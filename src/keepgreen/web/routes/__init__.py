"""Routes of API v1, one module per feature."""
