"""Command-line programs; each parses absl flags and calls one library function."""
