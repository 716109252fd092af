"""Payments flowing through Kafka: validated, routed to a valid or a rejected topic, and added up per account."""
