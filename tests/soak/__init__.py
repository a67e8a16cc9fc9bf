"""The long load, fuzz and kill runs (marked slow: `make soak`)."""
