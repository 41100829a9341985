"""rayservice."""
