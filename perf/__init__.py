"""Performance scenarios, generated test directories, comparisons and reports."""
