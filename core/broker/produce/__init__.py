"""Producing: the send requests, CONSUMER_SEND_MSG_BACK, and the write path every stored record takes."""
