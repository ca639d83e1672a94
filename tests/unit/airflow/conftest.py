"""Airflow's settings point at a private home before any test here imports Airflow."""

from tests.airflow_env import configure

configure()
