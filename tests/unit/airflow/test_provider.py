"""The provider as Airflow sees it: provider info, connection types and their forms,
common-messaging dispatch."""

from __future__ import annotations

import pytest
from airflow.providers_manager import ProvidersManager

from sluice_airflow.get_provider_info import get_provider_info
from sluice_airflow.hooks.queue import MqttQueueHook, QueueHook
from sluice_airflow.triggers.queue import QueueMessageTrigger


def test_provider_info_names_every_module_and_class() -> None:
    import importlib

    info = get_provider_info()
    assert info["package-name"] == "sluice-airflow"
    for section in ("hooks", "triggers", "sensors", "operators"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for dotted in [c["hook-class-name"] for c in info["connection-types"]] + info["queues"]:
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name), dotted


def test_airflow_registers_both_connection_types() -> None:
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    manager = ProvidersManager()
    assert "sluice-airflow" in manager.providers
    hooks = ProvidersManagerTaskRuntime().hooks
    assert hooks["sluice_kafka"] is not None
    assert hooks["sluice_kafka"].hook_class_name == "sluice_airflow.hooks.queue.QueueHook"
    assert hooks["sluice_mqtt"] is not None
    assert hooks["sluice_mqtt"].hook_class_name == "sluice_airflow.hooks.queue.MqttQueueHook"
    behaviours = manager.field_behaviours
    assert behaviours["sluice_kafka"]["hidden_fields"] == ["schema"]
    assert "group_id" in behaviours["sluice_kafka"]["placeholders"]["extra"]
    assert "client_id" in behaviours["sluice_mqtt"]["placeholders"]["extra"]


@pytest.mark.parametrize(("hook", "port"), [(QueueHook, "9092"), (MqttQueueHook, "1883")])
def test_connection_form_relabels_and_hints(hook: type[QueueHook], port: str) -> None:
    behaviour = hook.get_ui_field_behaviour()
    assert behaviour["hidden_fields"] == ["schema"]
    assert behaviour["relabeling"]["extra"] == "Sluice config keys (JSON)"
    assert behaviour["placeholders"]["port"] == port
    assert hook.conn_name_attr == "queue_conn_id"
    assert hook.default_conn_name == "sluice_default"


@pytest.mark.parametrize("scheme", ["sluice", "sluice+kafka", "sluice+mqtt"])
def test_common_messaging_trigger_runs_queue_message_trigger(scheme: str) -> None:
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger

    trigger = MessageQueueTrigger(scheme=scheme, conn_id="c", topic="t", min_messages=5)
    assert isinstance(trigger.trigger, QueueMessageTrigger)
    classpath, kwargs = trigger.serialize()
    assert classpath == "sluice_airflow.triggers.queue.QueueMessageTrigger"
    assert kwargs["min_messages"] == 5


def test_plain_kafka_scheme_is_not_ours() -> None:
    from sluice_airflow.queues.sluice import SluiceMessageQueueProvider

    assert not SluiceMessageQueueProvider().scheme_matches("kafka")
    assert SluiceMessageQueueProvider().trigger_class() is QueueMessageTrigger
