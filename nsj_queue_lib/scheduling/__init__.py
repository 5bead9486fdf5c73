"""Periodic tasks: schedules stored in the queue's database, run by the ordinary workers."""
