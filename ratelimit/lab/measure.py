"""What a lab measures: timed downloads (``ratelimit.linkmodel`` says how long they should take)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Download:
    """One HTTP download by curl from a client, timed."""

    url: str
    client: str
    http_code: int
    bytes: int
    seconds: float  # from starting to connect to the last byte
    connect_s: float  # TCP handshake: one round trip over the emulated link
    first_byte_s: float
    local_port: int
    header_bytes: int = 0  # the response's HTTP header
    request_bytes: int = 0

    @property
    def bps(self) -> float:
        """Payload bits per second over the whole download."""
        return self.bytes * 8 / self.seconds if self.seconds > 0 else float("inf")

    def model_seconds(self, model) -> float:
        """The time ``model`` (a ``linkmodel.LinkModel``) gives for exactly this download."""
        return model.fetch_seconds(self.bytes, header=self.header_bytes, request=self.request_bytes)

    def as_dict(self) -> dict:
        return {**asdict(self), "bps": self.bps}
