"""Messages that wait: delay levels and the timer queue, RECALL_MESSAGE, where a parked message goes."""
