"""Sluice for Apache Airflow 3: Kafka and MQTT batches into PySpark, exactly once.

- ``hooks.queue.QueueHook``: a ``sluice_kafka`` / ``sluice_mqtt`` connection as Sluice config
  keys and an opened queue; ``test_connection`` connects for real.
- ``sensors.queue.QueueMessageSensor``: waits (deferrable, poke or reschedule) until messages
  wait; returns the batch (a BatchSpec dict).
- ``triggers.queue.QueueMessageTrigger``: the same wait in the triggerer, for deferral and for
  ``AssetWatcher`` (event-driven scheduling; ``MessageQueueTrigger(scheme="sluice", ...)`` of
  the common-messaging provider runs it too).
- ``triggers.routed.RoutedMessageTrigger``: one ``AssetWatcher`` per route of a routed topic,
  all sharing one poller that wakes only the routes with messages in a batch.
- ``operators.spark.SparkIngestOperator``: ingests a batch into Parquet with
  ``sluice.spark.ingest`` (in-process or through spark-submit).
- ``operators.publish.QueuePublishOperator``: publishes messages.
- ``operators.audit.AuditOperator``: fails the DAG run when the sink disagrees with the broker.

Both ingest and publish operators give apache-airflow-providers-openlineage their inputs and
outputs (:mod:`sluice_airflow.lineage`); the ingest sends lag and freshness as Airflow metrics
(:mod:`sluice_airflow.metrics`).

Example DAGs: ``dags_examples/airflow`` in the Sluice repository.
"""
