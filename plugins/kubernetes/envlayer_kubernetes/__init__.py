"""envlayer backend for Kubernetes (see docs/backends/kubernetes.md). Importing it imports no client."""
