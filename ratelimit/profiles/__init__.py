"""profiles."""
