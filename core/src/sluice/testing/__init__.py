"""sluice.testing: embedded brokers for tests and demos."""
