"""The gRPC face: the data plane, the admin and peer services, and their codec and error statuses."""
