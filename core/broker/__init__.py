"""The broker: its state (broker.py), clients, registration, rooms by concept (produce/, consume/, ...)."""
