"""envlayer ssh backend."""
