"""Thin command-line front ends, one module per subcommand."""
