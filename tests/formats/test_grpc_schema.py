"""formats/rocketmq_v2: the generated module is what the .proto says, and the .proto keeps the
5.x clients' wire contract (names and numbers they send and read)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from formats.rocketmq_v2 import messaging_pb2 as pb

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_module_is_generated_from_the_proto(tmp_path):
    shutil.copytree(REPO / "formats" / "rocketmq_v2", tmp_path / "formats" / "rocketmq_v2")
    (tmp_path / "formats" / "rocketmq_v2" / "messaging_pb2.py").unlink()
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", ".", "--python_out=.",
                    "formats/rocketmq_v2/messaging.proto"], cwd=tmp_path, check=True)
    fresh = (tmp_path / "formats" / "rocketmq_v2" / "messaging_pb2.py").read_text()
    assert fresh == (REPO / "formats" / "rocketmq_v2" / "messaging_pb2.py").read_text(), \
        "messaging.proto changed: regenerate messaging_pb2.py (see the .proto's header)"


def test_the_service_and_the_numbers_the_clients_use():
    service = pb.DESCRIPTOR.services_by_name["MessagingService"]
    assert service.full_name == "apache.rocketmq.v2.MessagingService"
    assert {m.name for m in service.methods} >= {
        "QueryRoute", "Heartbeat", "SendMessage", "QueryAssignment", "ReceiveMessage", "AckMessage",
        "ForwardMessageToDeadLetterQueue", "EndTransaction", "Telemetry", "NotifyClientTermination",
        "ChangeInvisibleDuration"}
    fields = pb.SystemProperties.DESCRIPTOR.fields_by_name
    assert {n: fields[n].number for n in ("tag", "message_id", "receipt_handle", "delivery_attempt",
                                          "message_group", "delivery_timestamp")} == {
        "tag": 1, "message_id": 3, "receipt_handle": 12, "delivery_attempt": 16, "message_group": 17,
        "delivery_timestamp": 11}
    command = pb.TelemetryCommand.DESCRIPTOR.fields_by_name
    assert command["settings"].number == 2 and command["recover_orphaned_transaction_command"].number == 5
    assert (pb.OK, pb.MESSAGE_NOT_FOUND, pb.INVALID_RECEIPT_HANDLE, pb.UNAUTHORIZED) == (20000, 40401, 40013, 40100)
