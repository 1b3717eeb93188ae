"""Task specifications, private-data readers and prompt formats for demonstration synthesis."""
