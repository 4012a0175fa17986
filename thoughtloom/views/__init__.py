"""Ways to look at a search: Mermaid pictures and live progress."""
