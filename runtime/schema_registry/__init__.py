"""Avro and JSON Schema serdes in the Confluent wire format, with their schemas in a schema registry."""
