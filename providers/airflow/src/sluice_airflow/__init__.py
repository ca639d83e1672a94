"""Sluice for Apache Airflow. The integration is being built; see the project issues."""
