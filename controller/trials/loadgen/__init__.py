"""Replaying a traffic shape against an endpoint: the plan, the client, its worker process, warm-up and the report."""
