"""PyTorch Flight Recorder dumps: dump reads one into an Extract, unpickler opens the pickle with
no global allowed, check checks every field before dump reads it."""
