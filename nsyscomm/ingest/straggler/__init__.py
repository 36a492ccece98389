"""The OSDI'25 straggler artifact's per-op traces: trace reads one (and its meta-*.yaml) into an
Extract, checks checks its columns before anything past it reads them."""
