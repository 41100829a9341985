"""kserve."""
