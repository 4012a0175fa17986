"""The `loom` command line."""
