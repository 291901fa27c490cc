"""The broker's gRPC services on a server: what the app's wiring registers, so that
the generated modules (and their service names) stay inside the gRPC face."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from stableline._proto import (
    admin_pb2,
    admin_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    cluster_pb2,
    cluster_pb2_grpc,
)
from stableline.broker.grpc.admin_service import AdminService
from stableline.broker.grpc.broker_service import BrokerService
from stableline.broker.grpc.peer_service import PeerService

# The services clients call (health answers SERVING for them once the broker is up);
# the Peer service is for the cluster's brokers only.
CLIENT_SERVICES = (
    broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
)
PEER_SERVICE = cluster_pb2.DESCRIPTOR.services_by_name["Peer"].full_name


def add_services(
    server: grpc.aio.Server,
    broker: BrokerService,
    admin: AdminService,
    peer: PeerService,
    health_servicer: health.aio.HealthServicer,
) -> None:
    """Register Broker, Admin, Peer, health and reflection on `server`."""
    broker_pb2_grpc.add_BrokerServicer_to_server(broker, server)
    admin_pb2_grpc.add_AdminServicer_to_server(admin, server)
    cluster_pb2_grpc.add_PeerServicer_to_server(peer, server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*CLIENT_SERVICES, PEER_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
