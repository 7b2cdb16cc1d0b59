"""Writes the descriptors of the official modal client's protos (modal 1.6.4's modal_proto:
the control plane and the task command router, with their imports) to stdout as a
serialized FileDescriptorSet, so that harness/tests/engine/parity/modal.rs decodes every
recorded message with the published definitions, fields our subset protos leave out
included."""

import sys

from google.protobuf import descriptor_pb2
from modal_proto import api_pb2, task_command_router_pb2

found = descriptor_pb2.FileDescriptorSet()
seen = set()


def add(file):
    if file.name in seen:
        return
    for dependency in file.dependencies:
        add(dependency)
    seen.add(file.name)
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    found.file.append(proto)


add(api_pb2.DESCRIPTOR)
add(task_command_router_pb2.DESCRIPTOR)
sys.stdout.buffer.write(found.SerializeToString())
