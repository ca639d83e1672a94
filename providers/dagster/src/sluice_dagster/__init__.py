"""Sluice for Apache Dagster. The integration is being built; see the project issues."""
