"""envlayer backend for Kubernetes (see docs/backends/kubernetes.md). Importing it imports no client."""

__version__ = "0.1.0"
