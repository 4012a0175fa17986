"""Model access: backends (embedded llama.cpp, OpenAI-compatible, scripted fake) behind a budgeted gateway."""
