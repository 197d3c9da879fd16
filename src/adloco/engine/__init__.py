"""Training engine: node slots, trainers, rounds, checkpoints (single process)."""
