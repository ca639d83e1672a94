"""Sluice: message brokers to batch data pipelines."""
