"""PyTorch profiler (Kineto) JSON traces: trace reads one into an Extract, stream parses it as a
stream, checks bounds what it keeps, meta reads the collective metadata PyTorch records."""
