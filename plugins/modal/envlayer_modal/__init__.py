"""envlayer backend for Modal sandboxes."""
