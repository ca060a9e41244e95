"""Wire contracts: message dataclasses and their Avro codec."""
