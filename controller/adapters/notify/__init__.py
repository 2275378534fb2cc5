"""Notifiers: Slack (:mod:`.slack`, messages from :mod:`.slack_format`), Grafana annotations (:mod:`.grafana`), the
delivery queue both post through (:mod:`.delivery_queue`), and notifiers that record or drop (:mod:`.recording`)."""
