"""Connection slots and accept loops shared by the ports that take raw sockets (Kafka, HTTP) and the gRPC port."""
