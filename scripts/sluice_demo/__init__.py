"""The Sluice demo (``make demo``): IoT readings from Kafka and MQTT into Parquet, end to end.

1. starts the embedded brokers (Apache Kafka, mosquitto for MQTT, as ``sluice brokers
   up`` does) with their state in ``$SLUICE_HOME/demo`` (default ``~/.sluice/demo``);
2. starts one local SparkSession (``local[2]``) and a throwaway Airflow home (sqlite, in
   ``$SLUICE_HOME/demo/airflow-<pid>``);
3. opens the MQTT session of the Dagster sensor (its first tick: nothing waits yet);
4. for each wave: publishes sample readings, a few of them malformed, to Kafka and to MQTT
   (``sluice publish --sample iot``); runs the Airflow example DAG ``kafka_to_parquet`` with
   ``dag.test()`` (deferrable sensor, then Spark ingest); ticks the Dagster sensor
   ``mqtt_readings_sensor`` and runs the job it asks for (``mqtt_readings``);
5. checks the Parquet datasets against what the runs reported, draws ``ingested.png`` and
   prints a summary table.

The brokers it started are stopped by pid at the end, also after an error or Ctrl-C. The
libraries' own logs (Airflow, Dagster, Spark) go to ``<output>/demo.log``; the terminal shows
the steps. Runs inside the workspace's venv (it needs sluice-airflow and sluice-dagster)::

    uv run --all-packages python scripts/demo.py [--output DIR] [--waves N] [--verbose]
"""
