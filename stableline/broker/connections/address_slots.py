"""Connection slots of one port: a total and a per-address cap, shared by whatever
holds a connection there (an accepted socket on the Kafka and HTTP ports, a client
with a call open on the gRPC port)."""

from __future__ import annotations

import enum

from stableline.broker.connections.caps import PortCaps


class Refusal(enum.Enum):
    TOTAL = "total"
    ADDRESS = "address"


class AddressSlots:
    """Connections held per address; `take` refuses the one past either cap."""

    def __init__(self, caps: PortCaps) -> None:
        self.caps = caps
        self._held: dict[str, int] = {}
        self._count = 0
        self.refused_total = 0
        self.refused_address = 0

    def __len__(self) -> int:
        return self._count

    def held_by(self, address: str) -> int:
        return self._held.get(address, 0)

    def refusal(self, address: str) -> Refusal | None:
        """The cap one more connection of `address` would break, or None."""
        if self._count >= self.caps.total:
            return Refusal.TOTAL
        if self._held.get(address, 0) >= self.caps.per_address:
            return Refusal.ADDRESS
        return None

    def take(self, address: str) -> Refusal | None:
        """Count one more connection of `address`; the cap it would break (nothing
        counted, the refusal counted) or None."""
        refusal = self.refusal(address)
        if refusal is Refusal.TOTAL:
            self.refused_total += 1
        elif refusal is Refusal.ADDRESS:
            self.refused_address += 1
        else:
            self._held[address] = self._held.get(address, 0) + 1
            self._count += 1
        return refusal

    def release(self, address: str) -> None:
        held = self._held[address] - 1
        assert held >= 0
        if held:
            self._held[address] = held
        else:
            del self._held[address]
        self._count -= 1

    def stats(self) -> dict[str, int]:
        return {
            "connections": self._count,
            "addresses": len(self._held),
            "maxConnections": self.caps.total,
            "maxConnectionsPerAddress": self.caps.per_address,
            "refusedConnections": self.refused_total + self.refused_address,
            "refusedPerAddress": self.refused_address,
        }
