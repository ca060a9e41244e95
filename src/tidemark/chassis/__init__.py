"""The service chassis: one way to configure, observe and run every Tidemark service."""
