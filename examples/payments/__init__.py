"""Payments flowing through Kafka: validated, then routed to a valid or a rejected topic."""
