"""Running commands and carrying their output: the persistent shell session and its script, byte
streams, output caps and collection, cancellation, and killing a command's process tree (locally or
inside a sandbox)."""
